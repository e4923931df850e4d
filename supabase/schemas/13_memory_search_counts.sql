-- memory_search_counts: per user, how many rows they have in memory_search_docs (their share of a partition,
-- which decides memory_search's vector plan) and the last number given to one of their rows (seq).
create table memory_private.memory_search_counts (
    user_id          uuid     primary key,
    docs             integer  not null,
    -- The last memory_search_docs.seq given to this user's rows; only grows.
    last_seq         bigint   not null default 0,
    -- The partition of memory_search_docs holding the user's rows (hash of user_id), as the trigger saw it.
    search_partition regclass
);

comment on table memory_private.memory_search_counts is
    'Rows of each user in memory_search_docs (memory_plugin) and the user''s insertion counter, kept by triggers; memory_search compares the count with the partition''s size to choose between an exact vector scan and the HNSW index. RLS: a user sees only their own row.';

alter table memory_private.memory_search_counts enable row level security;

-- The triggers run as the writing user, so the user may write their own row (and nobody else's). Changing it
-- by hand changes only the plan of that user's own searches and the order of their own new facts.
create policy memory_search_counts_select_own on memory_private.memory_search_counts
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_search_counts_insert_own on memory_private.memory_search_counts
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_search_counts_update_own on memory_private.memory_search_counts
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_search_counts_delete_own on memory_private.memory_search_counts
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_search_counts from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_search_counts to authenticated;
grant all on table memory_private.memory_search_counts to service_role;

-- Row triggers: facts are written one search row at a time (memory_search_docs_sync), so a row trigger is one
-- upsert per fact. A 700-fact write: +20 ms of ~200 (a statement trigger with a transition table, fired for
-- each of those one-row statements: +45 ms); a one-fact write: no difference within noise. BEFORE insert, so
-- it also numbers the row (seq) from the same upsert.
create function memory_private.memory_search_counts_add() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    -- A bulk load numbers its rows itself and counts them once (memory_private.memory_search_index_facts).
    if memory_private.memory_bulk_load() then
        return new;
    end if;
    -- The trigger fires on the partition: tg_relid is the partition the row lands in.
    insert into memory_private.memory_search_counts as c (user_id, docs, last_seq, search_partition)
    values (new.user_id, 1, 1, tg_relid::regclass)
    on conflict (user_id) do update
        set docs = c.docs + 1, last_seq = c.last_seq + 1, search_partition = excluded.search_partition
    returning c.last_seq into new.seq;
    return new;
end;
$$;

create function memory_private.memory_search_counts_remove() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    update memory_private.memory_search_counts c set docs = greatest(0, c.docs - 1) where c.user_id = old.user_id;
    return null;
end;
$$;

create trigger memory_search_docs_count_added
    before insert on public.memory_search_docs
    for each row execute function memory_private.memory_search_counts_add();

create trigger memory_search_docs_count_removed
    after delete on public.memory_search_docs
    for each row execute function memory_private.memory_search_counts_remove();

revoke all on function memory_private.memory_search_counts_add() from public, anon;
revoke all on function memory_private.memory_search_counts_remove() from public, anon;
grant execute on function memory_private.memory_search_counts_add() to authenticated, service_role;
grant execute on function memory_private.memory_search_counts_remove() to authenticated, service_role;
