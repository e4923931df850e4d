-- The parts of Supabase that memory_plugin's migrations rely on, for a plain PostgreSQL (the embedded
-- default and the tests). Never applied to a Supabase project: the migrator runs it only when auth.uid()
-- does not exist. auth.uid() reads the JWT claims exactly as Supabase's does, from the settings that
-- PostgREST sets for each request:
--   select set_config('role', 'authenticated', true);
--   select set_config('request.jwt.claims', '{"sub": "<user uuid>", "role": "authenticated"}', true);

do $$
begin
    if not exists (select from pg_roles where rolname = 'anon') then
        create role anon nologin noinherit;
    end if;
    if not exists (select from pg_roles where rolname = 'authenticated') then
        create role authenticated nologin noinherit;
    end if;
    if not exists (select from pg_roles where rolname = 'service_role') then
        create role service_role nologin noinherit bypassrls;
    end if;
end
$$;

create schema if not exists auth;
grant usage on schema auth to anon, authenticated, service_role;
grant usage on schema public to anon, authenticated, service_role;

create or replace function auth.jwt() returns jsonb
    language sql stable
as $$
    select coalesce(nullif(current_setting('request.jwt.claims', true), ''), '{}')::jsonb
$$;

create or replace function auth.uid() returns uuid
    language sql stable
as $$
    select coalesce(
        nullif(current_setting('request.jwt.claim.sub', true), ''),
        auth.jwt() ->> 'sub'
    )::uuid
$$;

create or replace function auth.role() returns text
    language sql stable
as $$
    select coalesce(nullif(current_setting('request.jwt.claim.role', true), ''), auth.jwt() ->> 'role')
$$;

grant execute on function auth.jwt(), auth.uid(), auth.role() to anon, authenticated, service_role;
