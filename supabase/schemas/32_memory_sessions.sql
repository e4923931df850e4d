-- memory_sessions (memory_private: machinery the REST API does not expose): short-term sessions shared by every worker (the Postgres `SessionBackend`). One row per
-- session, keyed by (session id, owner): two users may each have a session `chat-1`, and anonymous sessions
-- (owner null) are a namespace of their own (`nulls not distinct`: one anonymous `chat-1`). A row holds the
-- message window, entities, intents, and its last activity in seconds of the store's clock. Expiry needs no cron: every access treats a session idle longer
-- than the TTL as gone (and replaces it), and `expire()` deletes what is due.
--
-- The store runs on the service path (the pool's role), enforcing the owner rule itself as the RAM store does:
-- reading someone else's session must be refused, which RLS could only hide. RLS still guards the table for
-- direct API access: a signed-in user reads only their own sessions.

create table memory_private.memory_sessions (
    session_id     text not null check (length(session_id) between 1 and 500),
    user_id        uuid,
    messages       jsonb not null default '[]'::jsonb check (jsonb_typeof(messages) = 'array'),
    entities       jsonb not null default '{}'::jsonb check (jsonb_typeof(entities) = 'object'),
    intents        jsonb not null default '[]'::jsonb check (jsonb_typeof(intents) = 'array'),
    messages_seen  integer not null default 0,
    last_active    double precision not null,
    constraint memory_sessions_owner_key unique nulls not distinct (session_id, user_id)
);

create index memory_sessions_user_idx on memory_private.memory_sessions (user_id, last_active);
create index memory_sessions_activity_idx on memory_private.memory_sessions (last_active);

alter table memory_private.memory_sessions enable row level security;

create policy memory_sessions_select_own on memory_private.memory_sessions
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_sessions_insert_own on memory_private.memory_sessions
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_sessions_update_own on memory_private.memory_sessions
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_sessions_delete_own on memory_private.memory_sessions
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_sessions from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_sessions to authenticated;
grant all on table memory_private.memory_sessions to service_role;
