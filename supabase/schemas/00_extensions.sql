-- Extensions and the private schema.
--
-- Requires Supabase's `auth` schema (auth.uid()) and roles anon / authenticated / service_role; outside
-- Supabase the plugin first applies supabase/embedded/auth_shim.sql, which provides them.
--
-- Extensions live in the `extensions` schema, as on Supabase; every function names its schema (search_path is
-- empty), so an extension installed elsewhere is moved there. pg_trgm: trigram similarity (near-duplicates);
-- btree_gist: kept installed, though no index uses it since the near-duplicate probe reads word keys; vector:
-- halfvec embeddings and HNSW; unaccent: accent-insensitive text search.
create schema if not exists extensions;
grant usage on schema extensions to anon, authenticated, service_role;
do $$
declare
    ext text;
begin
    foreach ext in array array['pg_trgm', 'btree_gist', 'vector', 'unaccent'] loop
        if exists (select from pg_extension e join pg_namespace n on n.oid = e.extnamespace
                    where e.extname = ext and n.nspname <> 'extensions') then
            execute format('alter extension %I set schema extensions', ext);
        end if;
        execute format('create extension if not exists %I with schema extensions', ext);
    end loop;
end
$$;

-- memory_private: the machinery behind user_memory (search postings, per-user counts, the partitions of
-- memory_search_docs, applied write ids, trigger and text helper functions). Not in the API's schemas
-- (supabase/config.toml: PostgREST exposes `public` only), so it stays out of the REST API and out of the
-- table editor's default view. Grants and row-level security on its tables are those of the public tables:
-- the plugin's functions run as the calling user (security invoker) and read these tables under RLS.
create schema if not exists memory_private;
comment on schema memory_private is
    'Internal tables and functions of memory_plugin (search postings, counts, partitions, applied writes). Not exposed through the API; RLS as on public.user_memory.';
revoke all on schema memory_private from public, anon;
grant usage on schema memory_private to authenticated, service_role;
