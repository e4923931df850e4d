-- memory_search_terms: the full-text index of each user's facts, as a table: one row per (user, lexeme, fact)
-- with the lexeme's frequency in the fact, in a btree. Not a GIN index on the tsvector: under row-level
-- security PostgreSQL evaluates a query's non-leakproof conditions only after the policy's, and `@@`
-- (ts_match_vq) is not leakproof, so as `authenticated` a GIN index is never used and every search scanned
-- all of the user's facts (19 ms at 10k facts, growing linearly). Equality on text is leakproof: this btree
-- is used under RLS, reads only the postings of the question's words, and gives each word's document
-- frequency for free, hence BM25 (+0.005 recall@10 over ts_rank on LoCoMo).
create table memory_private.memory_search_terms (
    user_id   uuid     not null,
    lexeme    text     not null,
    memory_id uuid     not null,
    tf        smallint not null,
    -- No foreign key to memory_search_docs: its check ran once per posting (~8 a fact), as a plan cached per
    -- connection; planned while the tables were empty, it read all of the user's search rows for each one
    -- (a 100-fact write: 55 ms at 3,000 facts from a fresh connection, 1,000 ms from the pool's first one).
    -- The postings are written and deleted only by the trigger below, which follows memory_search_docs.
    constraint memory_search_terms_pkey primary key (user_id, lexeme, memory_id) include (tf)
);

comment on table memory_private.memory_search_terms is
    'Full-text postings of each fact (memory_plugin): lexeme and its frequency, derived from memory_search_docs.search_tsv by a trigger. RLS: a user sees only their own rows.';

create index memory_search_terms_memory_id_idx on memory_private.memory_search_terms (user_id, memory_id);

alter table memory_private.memory_search_terms enable row level security;

create policy memory_search_terms_select_own on memory_private.memory_search_terms
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_search_terms_insert_own on memory_private.memory_search_terms
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_search_terms_update_own on memory_private.memory_search_terms
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_search_terms_delete_own on memory_private.memory_search_terms
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_search_terms from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_search_terms to authenticated;
grant all on table memory_private.memory_search_terms to service_role;

-- A fact's postings follow its text, and go with its search row.
create function memory_private.memory_search_terms_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    if tg_op = 'DELETE' then
        delete from memory_private.memory_search_terms t where t.user_id = old.user_id and t.memory_id = old.memory_id;
        return null;
    end if;
    if tg_op = 'INSERT' and memory_private.memory_bulk_load() then
        return null;  -- a bulk load writes the postings of all its rows in one statement
    end if;
    if tg_op = 'UPDATE' then
        if new.search_tsv = old.search_tsv then
            return null;
        end if;
        delete from memory_private.memory_search_terms t where t.user_id = new.user_id and t.memory_id = new.memory_id;
    end if;
    insert into memory_private.memory_search_terms (user_id, lexeme, memory_id, tf)
    select new.user_id, u.lexeme, new.memory_id, least(cardinality(u.positions), 32767)
      from unnest(new.search_tsv) as u;
    return null;
end;
$$;

create trigger memory_search_docs_terms_sync
    after insert or update of content or delete on public.memory_search_docs
    for each row execute function memory_private.memory_search_terms_sync();

revoke all on function memory_private.memory_search_terms_sync() from public, anon;
grant execute on function memory_private.memory_search_terms_sync() to authenticated, service_role;
