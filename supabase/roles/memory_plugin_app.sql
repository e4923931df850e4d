-- The database role memory_plugin should connect as in production: a login role that can do nothing
-- by itself and may only become `authenticated` (row-level security applies) for each user's statements.
-- Not a migration (it carries a password and is per deployment): run it once as an administrator, e.g.
--
--   psql "$ADMIN_DATABASE_URL" -v app_password="'a long random secret'" -f supabase/roles/memory_plugin_app.sql
--
-- then set MEMORY_DATABASE_URL=postgresql://memory_plugin_app:<secret>@<host>:<port>/postgres and keep the
-- administrator's URL for migrations and erasures only (MEMORY_ADMIN_DATABASE_URL, `memory-plugin migrate`,
-- `memory-plugin erase`). On Supabase, use the session pooler or direct connection host for this role.
--
-- noinherit: holding `authenticated` grants nothing until the plugin runs set_config('role', 'authenticated',
-- true) inside a transaction, which it does before every user-scoped statement (with that user's claims).

create role memory_plugin_app login noinherit password :app_password;
grant authenticated to memory_plugin_app;
-- The background job queue's functions (migration 20261124020000_memory_jobs.sql creates the role); the
-- plugin switches to it for queue statements only, as it does to `authenticated` for a user's statements.
grant memory_worker to memory_plugin_app;
-- A runaway query must not hold connections: user statements are small, indexed and bounded.
alter role memory_plugin_app set statement_timeout = '5s';
-- Not granted: service_role (it bypasses RLS), anon, ownership of anything, create on any schema.
