-- memory_search_docs: the search row of each fact: its text, tsvector, embedding (with the model that made it),
-- speaker, time expressions, and its place in its session. Kept in `public` beside user_memory so the
-- dashboard shows each vector next to the text it was computed from; its partitions are in memory_private.
--
-- A table of its own rather than columns on user_memory: memory_context and memory_upsert_items return
-- `setof user_memory`, and a 384-dimension vector plus a tsvector on every returned row would cost each
-- context read ~1.6 kB per fact for nothing; search joins user_memory only for its few candidates.
-- One embedding per fact, with its model: a search filters `embedding_model = p_model`, so vectors of two
-- models are never compared; after a model change `memory-plugin reembed` rewrites them (until then those
-- facts are found by text only). HNSW needs a fixed dimension: 384 (all-MiniLM-L6-v2; OpenAI's
-- text-embedding-3-small is asked for dimensions=384).
--
-- Hash-partitioned by user (16 partitions), an HNSW index each. pgvector's HNSW cannot filter by user inside
-- the graph: it walks everyone's nearest vectors and drops other users' rows. With 20k rows of other users, a
-- 10k-fact user (a third of the rows) cost 16 ms per vector search against 2 ms unfiltered. A user's search
-- reads one partition, where the user is 16 times more of the rows, so the walk finds their vectors early.
create table public.memory_search_docs (
    user_id         uuid        not null,
    memory_id       uuid        not null,
    -- Neighbours (the turns just before and after a hit) are the previous and next fact of the same session.
    session_id      text,
    -- The user's own insertion counter (memory_search_counts.last_seq, set by a trigger): it orders a session's
    -- facts and the embedding backlog. Per user, not a shared sequence, whose values would show how fast
    -- everyone else writes.
    seq             bigint      not null,
    -- The fact written just before this one in the same session (set at insert): neighbours are then
    -- primary-key lookups at search time (a range scan per candidate cost 0.04 ms, 6 ms per search).
    prev_memory_id  uuid,
    -- The fact's text, as embedded and as searched (kept equal to user_memory.content by a trigger).
    content         text        not null,
    search_tsv      tsvector    generated always as (memory_private.memory_tsvector(content)) stored,
    has_time        boolean     generated always as (memory_private.memory_has_time_expression(content)) stored,
    -- user_memory.metadata->>'speaker', lower-cased and unaccented: a question naming them favours their facts.
    speaker         text,
    -- halfvec (2 bytes a dimension): half the memory of float4 for the heap and the HNSW index, so a large
    -- user's partition stays in cache (at 100k facts a float4 index no longer did: 16 ms, half of it disk
    -- reads); cosine similarities differ by < 1e-3, LoCoMo recall unchanged.
    embedding       extensions.halfvec(384),
    embedding_model text,
    embedded_at     timestamptz,
    -- No foreign key to user_memory: its check ran once per fact as a plan cached per connection; planned
    -- while the tables were empty it read the user's facts, so a 200-fact write passed 5 s at ~5,000 facts.
    -- The rows are written by user_memory_search_docs_sync and deleted by user_memory_search_docs_drop.
    constraint memory_search_docs_pkey primary key (user_id, memory_id),
    constraint memory_search_docs_embedding_model_check check ((embedding is null) = (embedding_model is null))
) partition by hash (user_id);

-- Partitions are reached only through the table above: no grants of their own, RLS enabled as well.
do $$
begin
    for i in 0..15 loop
        execute format('create table memory_private.memory_search_docs_p%s partition of public.memory_search_docs'
                       ' for values with (modulus 16, remainder %s)', lpad(i::text, 2, '0'), i);
        execute format('alter table memory_private.memory_search_docs_p%s enable row level security',
                       lpad(i::text, 2, '0'));
        execute format('revoke all on table memory_private.memory_search_docs_p%s from anon, authenticated',
                       lpad(i::text, 2, '0'));
    end loop;
end
$$;

-- Vectors stay inside the row (pgvector's default storage moves them out of line once a row passes ~2 kB,
-- which a long text with its tsvector does): every distance computed then reads the page it is on.
alter table public.memory_search_docs alter column embedding set storage main;

comment on table public.memory_search_docs is
    'Search index of each fact (memory_plugin): its text, tsvector and embedding (with the model that made it). Maintained by triggers on user_memory; embeddings written at fact creation or by `memory-plugin reembed`. Partitions in memory_private. RLS: a user sees only their own rows.';
comment on column public.memory_search_docs.content is 'The plain text the embedding was computed from.';
comment on column public.memory_search_docs.embedding_model is 'The embedding model, e.g. sentence-transformers:all-MiniLM-L6-v2; searches compare only vectors of one model.';

-- HNSW per partition (pgvector's default m and ef_construction); memory_search chooses between it and an
-- exact scan by the user's share of their partition.
create index memory_search_docs_embedding_idx on public.memory_search_docs
    using hnsw (embedding extensions.halfvec_cosine_ops);
-- Deleting a fact (user_memory) finds its row by memory_id alone.
create index memory_search_docs_memory_id_idx on public.memory_search_docs (memory_id);
-- The exact vector scan reads the user's vectors from this index (index-only) instead of from the table,
-- where they sit one or two to a page among other users' rows. 10k vectors of a user sharing the 100k user's
-- partition, written interleaved: 25.8 ms p50 a search through the table, a few contiguous pages per hundred
-- vectors this way. The cost: each vector stored a third time (table, HNSW, here), ~0.8 kB per fact.
create index memory_search_docs_user_model_idx on public.memory_search_docs (user_id, embedding_model)
    include (memory_id, embedding);
create index memory_search_docs_session_idx on public.memory_search_docs (user_id, session_id, seq);
create index memory_search_docs_next_idx on public.memory_search_docs (user_id, prev_memory_id)
    where prev_memory_id is not null;

alter table public.memory_search_docs enable row level security;

create policy memory_search_docs_select_own on public.memory_search_docs
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_search_docs_insert_own on public.memory_search_docs
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_search_docs_update_own on public.memory_search_docs
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_search_docs_delete_own on public.memory_search_docs
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table public.memory_search_docs from anon, authenticated;
grant select, insert, update, delete on table public.memory_search_docs to authenticated;
grant all on table public.memory_search_docs to service_role;

-- Every fact gets its search row when written; a changed text drops the stale embedding. Runs as the writer
-- (security invoker, the default for triggers), under the same RLS. Update first, insert when there is no
-- row: the insert trigger of memory_search_docs counts rows and numbers them, once per fact. A sealed fact
-- (key_id set: encrypted by memory_plugin/crypto) gets no search row, and loses one it had: the row's text,
-- tsvector and postings would be its plain text's, which must not be at rest.
create function memory_private.memory_search_docs_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
declare
    v_speaker text := nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary,
                                                       new.metadata ->> 'speaker')), '');
begin
    if new.key_id is not null then
        delete from public.memory_search_docs d where d.user_id = new.user_id and d.memory_id = new.id;
        return null;
    end if;
    -- A bulk load (an import, service path only) indexes its facts afterwards, in one statement
    -- (memory_private.memory_search_index_facts, 45_memory_bulk_load.sql).
    if tg_op = 'INSERT' and memory_private.memory_bulk_load() then
        return null;
    end if;
    if tg_op = 'UPDATE' then
        if new.content is not distinct from old.content
           and new.session_id is not distinct from old.session_id
           and new.metadata ->> 'speaker' is not distinct from old.metadata ->> 'speaker' then
            return null;
        end if;
        update public.memory_search_docs d
           set session_id      = new.session_id,
               speaker         = v_speaker,
               content         = new.content,
               embedding       = case when d.content = new.content then d.embedding end,
               embedding_model = case when d.content = new.content then d.embedding_model end,
               embedded_at     = case when d.content = new.content then d.embedded_at end
         where d.user_id = new.user_id and d.memory_id = new.id;
        if found then
            return null;
        end if;
    end if;
    insert into public.memory_search_docs (memory_id, user_id, session_id, content, speaker, prev_memory_id)
    values (new.id, new.user_id, new.session_id, new.content, v_speaker,
            case when new.session_id is not null then
                (select p.memory_id from public.memory_search_docs p
                  where p.user_id = new.user_id and p.session_id = new.session_id and p.memory_id <> new.id
                  order by p.seq desc limit 1) end);
    return null;
end;
$$;

create trigger user_memory_search_docs_sync
    after insert or update of content, session_id, metadata on public.user_memory
    for each row when (new.kind = 'fact')
    execute function memory_private.memory_search_docs_sync();

revoke all on function memory_private.memory_search_docs_sync() from public, anon;
grant execute on function memory_private.memory_search_docs_sync() to authenticated, service_role;

-- A deleted fact takes its search row (and through it its postings and count) with it.
create function memory_private.memory_search_docs_drop() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    delete from public.memory_search_docs d where d.user_id = old.user_id and d.memory_id = old.id;
    return null;
end;
$$;

create trigger user_memory_search_docs_drop
    after delete on public.user_memory
    for each row
    execute function memory_private.memory_search_docs_drop();

revoke all on function memory_private.memory_search_docs_drop() from public, anon;
grant execute on function memory_private.memory_search_docs_drop() to authenticated, service_role;

-- A search row belongs to one of the user's facts: a row naming any other id is refused, as a foreign key
-- would (23503), so a client of the REST API cannot grow the search table past the user's facts (its primary
-- key is (user_id, memory_id), and facts are bounded by `facts_per_user`). A row trigger with a lookup by the
-- facts' unique (user_id, id) index, not a foreign key: the foreign key's cached check plans, made on an empty
-- table, read every search row of the user per fact (`bench/write_scaling.py`). The lookup asks for the ids in
-- order (`>=`, `order by`, `limit 1`): under memory_upsert_items' planner settings (sorts disabled) no other
-- index can serve it, whatever the statistics said when its plan was made. A row written by a trigger (the
-- search row memory_search_docs_sync writes for the fact it fires for) names that fact: not looked up.
create function memory_private.memory_search_docs_follow_fact() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    -- Another user's row, written as `authenticated`: row-level security refuses it with its own error.
    if coalesce(current_setting('role', true), '') = 'authenticated' and new.user_id is distinct from auth.uid() then
        return new;
    end if;
    if pg_trigger_depth() > 1 and tg_op = 'INSERT' then
        return new;
    end if;
    if not exists (select 1 from (select m.id, m.kind from public.user_memory m
                                   where m.user_id = new.user_id and m.id >= new.memory_id
                                   order by m.id limit 1) as f
                    where f.id = new.memory_id and f.kind = 'fact') then
        raise exception 'a search row must name one of the user''s facts'
            using errcode = '23503', detail = 'memory_search_docs.memory_id';
    end if;
    return new;
end;
$$;

create trigger memory_search_docs_follow_fact
    before insert or update of memory_id, user_id on public.memory_search_docs
    for each row execute function memory_private.memory_search_docs_follow_fact();

revoke all on function memory_private.memory_search_docs_follow_fact() from public, anon;
grant execute on function memory_private.memory_search_docs_follow_fact() to authenticated, service_role;
