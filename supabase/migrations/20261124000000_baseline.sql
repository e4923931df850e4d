-- Baseline: the whole memory_plugin schema, as supabase/schemas/*.sql describes it (those files in order).
-- Migrations are append-only from here: a change is a new timestamped file (`supabase db diff -f <name>`
-- after editing supabase/schemas/), never an edit of a landed one (migrations/CHECKSUMS, checked by
-- tests/test_migrations.py). One transaction, as the Supabase CLI and memory_plugin's migrator apply it.


-- ==== supabase/schemas/00_extensions.sql

-- Extensions and the private schema.
--
-- Requires Supabase's `auth` schema (auth.uid()) and roles anon / authenticated / service_role; outside
-- Supabase the plugin first applies supabase/embedded/auth_shim.sql, which provides them.
--
-- Extensions live in the `extensions` schema, as on Supabase; every function names its schema (search_path is
-- empty), so an extension installed elsewhere is moved there. pg_trgm: trigram similarity (near-duplicates);
-- btree_gist: user_id beside the trigrams in one GiST index; vector: halfvec embeddings and HNSW; unaccent:
-- accent-insensitive text search.
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


-- ==== supabase/schemas/01_text_search.sql

-- Text helpers of search: the text-search configuration and two immutable functions used by generated
-- columns of memory_search_docs and by memory_search.

-- English stemming with English *and* Spanish stop words dropped (the plugin's users write both). On LoCoMo
-- (English) English stems beat `simple` by +0.09 BM25 recall@10; adding the `spanish` configuration as well
-- cost -0.02 recall@10 of the fused ranking (it keeps "what", "did" as lexemes that match every turn).
-- Spanish words pass through the English stemmer unchanged or lightly trimmed, identically in facts and
-- questions.
create text search dictionary memory_private.memory_spanish_stopwords (
    template = pg_catalog.simple, stopwords = spanish, accept = false
);
create text search configuration memory_private.memory_search (copy = pg_catalog.english);
alter text search configuration memory_private.memory_search
    alter mapping for asciiword, asciihword, hword_asciipart, word, hword, hword_part
    with memory_private.memory_spanish_stopwords, pg_catalog.english_stem;

-- The text-search form of a fact (and of a question, whose lexemes are looked up). `unaccent` is only
-- `stable` (its dictionary could change), so it is called with the dictionary named and the wrapper declared
-- immutable, as Supabase users do, to be usable in a generated column.
create function memory_private.memory_tsvector(p_text text) returns tsvector
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select to_tsvector('memory_private.memory_search'::regconfig,
                       extensions.unaccent('extensions.unaccent'::regdictionary, p_text));
$$;

-- Whether a text holds a time expression ("yesterday", "last week", "el sábado", a year): computed once per
-- fact at write time (a generated column), so "when" questions pay nothing per candidate for it.
create function memory_private.memory_has_time_expression(p_text text) returns boolean
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select lower(extensions.unaccent('extensions.unaccent'::regdictionary, p_text)) ~ (
        '\m(yesterday|today|tonight|tomorrow|last|next|ago|weekend|recently|lately|soon|'
        || '(mon|tues|wednes|thurs|fri|satur|sun)day|week|month|year|january|february|march|april|may|june|july|'
        || 'august|september|october|november|december|ayer|hoy|manana|semana|mes|ano|pasado|proximo|hace|lunes|'
        || 'martes|miercoles|jueves|viernes|sabado|domingo|[12][0-9]{3})s?\M');
$$;

revoke all on function memory_private.memory_tsvector(text) from public, anon;
revoke all on function memory_private.memory_has_time_expression(text) from public, anon;
grant execute on function memory_private.memory_tsvector(text) to authenticated, service_role;
grant execute on function memory_private.memory_has_time_expression(text) to authenticated, service_role;


-- ==== supabase/schemas/10_user_memory.sql

-- user_memory: a user's long-term memory, one row per item: a fact, a preference value, a project, a pattern.
--
-- Nothing is destroyed when a memory stops being true: a superseded or retracted fact keeps its row with
-- `invalid_at` set (and `superseded_by` naming its replacement), so history stays queryable; an expired or
-- archived one keeps its row too. Only current rows (`invalid_at` and `archived_at` null, `expires_at` null
-- or in the future) reach a prompt: the read functions filter them at read time.
--
-- The last five columns (content_hash, slot, match_key, match_guard, match_words) are internal keys the plugin
-- computes once per write (memory_plugin/quality/) and compares in SQL. They stay in this table because the
-- near-duplicate probe is one GiST index over (user_id, category, match_guard, match_key) restricted to
-- current facts (1.7 ms for a 13,000-fact user): an index cannot span two tables, and a side table would need
-- kind, category and the validity columns copied and kept in step. Their comments mark them internal.
create table public.user_memory (
    id                 uuid primary key default gen_random_uuid(),
    -- No foreign key to auth.users: apps may identify users outside Supabase Auth. Erasing a user's memory is
    -- an explicit operation (memory-plugin erase), not a cascade.
    user_id            uuid        not null,
    kind               text        not null check (kind in ('fact', 'preference', 'project', 'pattern')),
    -- fact: its category (memory_plugin.taxonomy); preference: the slot it fills; project and pattern: the
    -- kind again (so the column is never null and always filterable).
    category           text        not null,
    -- 20,000 characters: a verbatim note is a message someone wrote (MEMORY_MAX_NOTE_CHARS, 16,000 by default;
    -- ~2 % of everyday chat turns exceed 500 characters); extracted facts are held to MEMORY_MAX_FACT_CHARS.
    content            text        not null check (char_length(content) between 1 and 20000),
    confidence         real        not null default 0.6 check (confidence between 0 and 1),
    source             text        not null default 'inferred' check (source in ('explicit', 'inferred')),
    importance         smallint    not null default 3 check (importance between 1 and 5),
    relevance_count    integer     not null default 0 check (relevance_count >= 0),
    source_message_ids text[]      not null default '{}',
    session_id         text,
    -- Only the structured extras of projects (materials, quantity, status); empty for other kinds.
    attributes         jsonb       not null default '{}'::jsonb,
    content_hash       text        not null,
    created_at         timestamptz not null default now(),
    updated_at         timestamptz not null default now(),
    last_reinforced_at timestamptz not null default now(),
    occurred_at        timestamptz,
    expires_at         timestamptz,
    invalid_at         timestamptz,
    -- Scoped by user_id (the unique index below): a reference to another user's row is refused exactly like a
    -- reference to no row, so the foreign key cannot tell whether someone else's id exists.
    superseded_by      uuid,
    archived_at        timestamptz,
    metadata           jsonb       not null default '{}'::jsonb,
    slot               text,
    match_key          text,
    match_guard        text,
    match_words        text[],
    constraint user_memory_user_id_content_hash_key unique (user_id, content_hash),
    constraint user_memory_category_check check (
        (kind = 'fact' and category in ('preference', 'requirement', 'constraint', 'feedback', 'rejection',
                                        'goal', 'routine', 'contact', 'health_note', 'fact'))
        or (kind = 'preference' and category in
            ('preferred_materials', 'typical_quantities', 'communication_style', 'industry', 'location'))
        or (kind in ('project', 'pattern') and category = kind)
    )
);

-- The target of the user-scoped foreign keys (superseded_by here, memory_search_docs.memory_id).
create unique index user_memory_user_id_id_key on public.user_memory (user_id, id);

alter table public.user_memory
    add constraint user_memory_superseded_by_fkey foreign key (user_id, superseded_by)
        references public.user_memory (user_id, id) on delete set null (superseded_by);

comment on table public.user_memory is
    'Long-term conversational memory of each user (memory_plugin). One row per fact, preference value, project or request pattern. RLS: a user sees only their own rows. content_hash, slot, match_key, match_guard and match_words are internal keys.';
comment on column public.user_memory.relevance_count is 'Times the item was stated or observed again after it was first stored.';
comment on column public.user_memory.occurred_at is 'When the conversation that stated it happened (provenance); null when unknown.';
comment on column public.user_memory.expires_at is 'Temporary memories ("trip this weekend"): never shown after this time.';
comment on column public.user_memory.invalid_at is 'When it stopped being true (contradicted or retracted); the row is kept as history.';
comment on column public.user_memory.superseded_by is 'The memory that replaced this one, if any.';
comment on column public.user_memory.archived_at is 'Set by maintenance when its decayed confidence fell below the floor; kept, never shown.';
comment on column public.user_memory.metadata is 'Caller-supplied extras (e.g. a conversation turn id, a speaker).';
comment on column public.user_memory.content_hash is
    'Internal (memory_plugin): sha256 of the normalised content; unique per user, so repeats reinforce instead of duplicating.';
comment on column public.user_memory.slot is
    'Internal (memory_plugin), facts: the single-valued subject it is about (budget, lead_time, material:7075); a newer current fact of the same slot supersedes it.';
comment on column public.user_memory.match_key is
    'Internal (memory_plugin), facts: the content without case, accents or extra spaces; compared with pg_trgm similarity to find near-duplicates.';
comment on column public.user_memory.match_words is
    'Internal (memory_plugin), facts: content words cut to 5 letters; a near-duplicate adds or drops words, never swaps one ("viernes" for "lunes").';
comment on column public.user_memory.match_guard is
    'Internal (memory_plugin), facts: negation and the numbers/codes/named values in the content; near-duplicates have the same guard ("aluminio 7075" is not "aluminio 6061").';

-- memory_context reads preferences, projects and patterns through the first index.
create index user_memory_user_id_kind_idx on public.user_memory (user_id, kind, last_reinforced_at desc);
-- Ranked facts (memory_rank_facts): current facts other than rejections; `category` rides along so the decay
-- (a half-life per category) is computed from the index alone.
create index user_memory_fact_rank_idx on public.user_memory
    (user_id, importance, confidence desc, last_reinforced_at desc, id) include (expires_at, category)
    where kind = 'fact' and invalid_at is null and archived_at is null and category <> 'rejection';
-- The most recently reinforced facts of each importance level: the starting set of memory_rank_facts' bar.
create index user_memory_fact_recent_idx on public.user_memory
    (user_id, importance, last_reinforced_at desc, id) include (confidence, expires_at, category)
    where kind = 'fact' and invalid_at is null and archived_at is null and category <> 'rejection';
create index user_memory_rejection_idx on public.user_memory (user_id, last_reinforced_at desc, id)
    where kind = 'fact' and invalid_at is null and archived_at is null and category = 'rejection';
-- Near-duplicates: the user's current facts of a category and guard whose trigrams resemble the new fact's.
-- GiST over all four (btree_gist for the equalities) splits the tree by user first, so a probe costs what
-- that user's facts cost. On 113,000 rows (a user with 13,000 facts of a 20-word vocabulary, the worst case
-- for trigrams), one probe: GiST 1.7 ms for that user and 0.04 ms for a new user; GIN over the same columns
-- 2.8 to 70 ms and 1.1 ms (it reads every user's postings sharing the category and trigrams); GiST on
-- (user_id, match_key) alone 5.3 ms.
create index user_memory_fact_match_idx on public.user_memory
    using gist (user_id, category, match_guard, match_key extensions.gist_trgm_ops)
    where kind = 'fact' and invalid_at is null and archived_at is null;
create index user_memory_fact_slot_idx on public.user_memory (user_id, slot)
    where kind = 'fact' and slot is not null and invalid_at is null and archived_at is null;
create index user_memory_superseded_by_idx on public.user_memory (superseded_by) where superseded_by is not null;
-- Dates a question names ("on 13 October 2023") are matched against occurred_at.
create index user_memory_fact_occurred_idx on public.user_memory (user_id, occurred_at) where kind = 'fact';

create function memory_private.user_memory_touch_updated_at() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    new.updated_at := now();
    return new;
end;
$$;

create trigger user_memory_touch_updated_at
    before update on public.user_memory
    for each row execute function memory_private.user_memory_touch_updated_at();

-- Row-level security: the database itself keeps users apart, whatever the application code does.
-- What a user connected as `authenticated` can still learn about others, and why it is accepted:
--  - table sizes: pg_class.reltuples and pg_stat_user_tables are readable by every role, and EXPLAIN's
--    estimate for `where user_id = <id>` comes from the planner's statistics, so it approximates how many
--    rows a given user id has (pg_stats itself hides tables under RLS). It needs the other user's id, a
--    random UUID the plugin never shows to other users; the statistics also drive memory_search's choice of
--    vector plan and every index choice, so they are kept.
--  - timing: every read is bounded by the caller's own user_id inside an index, except memory_search's HNSW
--    walk, which slows as other users fill the caller's partition (22_memory_search.sql): it shows how crowded
--    one's own partition is, not whose rows are there.
--  - primary keys chosen by the caller (see the grants below).
-- Closed: foreign keys are scoped by user_id (a reference to another user's row fails as one to no row),
-- write ids are per user (memory_private.memory_applied_writes), and no sequence is shared (insertion order
-- is a per-user counter, memory_private.memory_search_counts.last_seq).
alter table public.user_memory enable row level security;

create policy user_memory_select_own on public.user_memory
    for select to authenticated using ((select auth.uid()) = user_id);
create policy user_memory_insert_own on public.user_memory
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy user_memory_update_own on public.user_memory
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy user_memory_delete_own on public.user_memory
    for delete to authenticated using ((select auth.uid()) = user_id);

-- A user inserting a row with an explicit `id` learns from the primary key whether that id exists. Accepted:
-- ids are random (gen_random_uuid, 122 bits) and never shown to other users, so a probe can only confirm an
-- id one already holds. (Revoking `id` from the insert grant would close it, at the price of a column-level
-- grant that clients and the table editor report as no insert privilege on the table.)
revoke all on table public.user_memory from anon, authenticated;
grant select, insert, update, delete on table public.user_memory to authenticated;
grant all on table public.user_memory to service_role;


-- ==== supabase/schemas/11_memory_applied_writes.sql

-- memory_applied_writes: the write ids memory_upsert_items has applied, so a replayed write is applied once.
--
-- While the database is unreachable the plugin appends writes to a local, fsynced journal and replays them
-- when it returns (memory_plugin/outage/). A write can commit while its acknowledgement is lost (timeout,
-- connection cut, crash between the commit and the journal's truncation) and is then replayed; reinforcement
-- is not idempotent (a repeat raises confidence and relevance_count), so the database recognises a write it
-- has already applied. memory_upsert_items records the write_id here in the same transaction as the rows it
-- writes: both commit or neither does. Two concurrent calls with the same id: the second one's insert waits on
-- the first one's uncommitted key; if the first commits, the second applies nothing; if it rolls back, the
-- second applies. Either way the write is applied exactly once.
--
-- Keyed by (user_id, write_id): write ids are chosen by clients, so one user's id never claims, blocks or
-- reveals another user's write with the same id.
create table memory_private.memory_applied_writes (
    user_id    uuid        not null,
    -- Chosen by the client (a random UUID per write) before the first attempt, kept across retries.
    write_id   uuid        not null,
    item_count integer,
    -- The rows the write produced (written, then superseded): a replay returns them as they are now.
    record_ids uuid[],
    applied_at timestamptz not null default now(),
    constraint memory_applied_writes_pkey primary key (user_id, write_id)
);

comment on table memory_private.memory_applied_writes is
    'Writes already applied by memory_upsert_items (memory_plugin), per user, so a replayed write is applied once. Rows older than the longest outage the plugin must survive can be deleted.';

-- Row-level security as on user_memory. memory_upsert_items fills record_ids in after the rows are written,
-- as the user (security invoker), so a user may update their own records; the row stays theirs (with check),
-- and changing record_ids only changes what a replay of their own write returns. Deleting one's own records
-- only lets that user's own old writes apply again.
alter table memory_private.memory_applied_writes enable row level security;

create policy memory_applied_writes_select_own on memory_private.memory_applied_writes
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_applied_writes_insert_own on memory_private.memory_applied_writes
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_applied_writes_update_own on memory_private.memory_applied_writes
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_applied_writes_delete_own on memory_private.memory_applied_writes
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_applied_writes from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_applied_writes to authenticated;
grant all on table memory_private.memory_applied_writes to service_role;


-- ==== supabase/schemas/12_memory_search_docs.sql

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
    constraint memory_search_docs_pkey primary key (user_id, memory_id),
    -- Scoped by user: naming another user's fact is refused exactly like naming no fact.
    constraint memory_search_docs_memory_id_fkey foreign key (user_id, memory_id)
        references public.user_memory (user_id, id) on delete cascade,
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
-- row: the insert trigger of memory_search_docs counts rows and numbers them, once per fact.
create function memory_private.memory_search_docs_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
declare
    v_speaker text := nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary,
                                                       new.metadata ->> 'speaker')), '');
begin
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


-- ==== supabase/schemas/13_memory_search_counts.sql

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


-- ==== supabase/schemas/14_memory_search_terms.sql

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
    constraint memory_search_terms_pkey primary key (user_id, lexeme, memory_id) include (tf),
    constraint memory_search_terms_doc_fkey foreign key (user_id, memory_id)
        references public.memory_search_docs (user_id, memory_id) on delete cascade
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

-- A fact's postings follow its text.
create function memory_private.memory_search_terms_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
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
    after insert or update of content on public.memory_search_docs
    for each row execute function memory_private.memory_search_terms_sync();

revoke all on function memory_private.memory_search_terms_sync() from public, anon;
grant execute on function memory_private.memory_search_terms_sync() to authenticated, service_role;


-- ==== supabase/schemas/20_memory_write.sql

-- Writes: memory_upsert_items (the write rules), memory_set_embeddings (vectors onto stored facts) and
-- memory_upsert_embedded (both in one round trip, plus near-duplicates by embedding). All `security invoker`:
-- RLS applies to the caller.

-- memory_upsert_items: write a batch of items in one statement (one round trip). p_items is a JSON array of
-- objects with the columns below (memory_plugin.rows.MemoryItem). Rules, all in one transaction:
--  0. exact repeat: an item whose content_hash the user already has reinforces that row: confidence rises by
--     p_reinforcement_step (bounded by 1), relevance_count and last_reinforced_at update, importance keeps the
--     max, provenance accumulates (the newest 50 message ids). A single-valued preference slot (hashed by
--     slot) whose value changed takes the new value and starts over. A superseded or archived row of that
--     hash is revived.
--  1. near-duplicates: a fact item with no stored row of its hash, similar (pg_trgm similarity of match_key
--     >= p_near_duplicate_threshold, same category, same match_guard, one's match_words within the other's)
--     to a current fact of the user other than the one it `replaces`, reinforces that fact instead of
--     inserting a row. Items landing on the same row are folded first (confidence and importance max,
--     provenance accumulated), so the ON CONFLICT touches each row once. A threshold above 1 turns this off.
--  2. `replaces`: an item naming a current fact of the user supersedes it: the old row gets invalid_at (when
--     the new fact was stated) and superseded_by (the new row).
--  3. slots: for every slot written, the most recently stated current fact of that slot stays current; the
--     user's other current facts of the slot are superseded by it.
-- A superseded row keeps everything but its content_hash, which gets a ':superseded:<id>' suffix: the unique
-- key is freed, so stating the old value again later inserts a new row and the history keeps both periods.
-- Returned: the rows written, then the rows superseded (invalid_at set). With p_write_id the write is applied
-- at most once per user (memory_private.memory_applied_writes): a replay returns the same rows as they are now.
create function public.memory_upsert_items(
    p_user_id uuid,
    p_items jsonb,
    p_reinforcement_step real default 0.1,
    p_write_id uuid default null,
    p_near_duplicate_threshold real default 0.8
)
    returns setof public.user_memory
    language plpgsql
    security invoker
    set search_path = ''
    -- Generic plans, planned once per connection: the statements below are planned in about a millisecond
    -- (which a one-fact write would pay on every call with custom plans), and a generic plan does not
    -- over-trust the statistics of one user id (a new user looks like it has no rows).
    set plan_cache_mode = force_generic_plan
as $$
declare
    v_now      timestamptz := now();
    v_written  uuid[];
    v_replaced uuid[];
    v_replacer uuid[];
    v_slots    text[];
    v_gone     uuid[] := '{}';
    v_more     uuid[];
begin
    if p_write_id is not null then
        insert into memory_private.memory_applied_writes (user_id, write_id, item_count)
        values (p_user_id, p_write_id, jsonb_array_length(p_items))
        on conflict (user_id, write_id) do nothing;
        if not found then
            -- lateral: one primary-key lookup per recorded row.
            return query
                select m.* from unnest(coalesce((select w.record_ids from memory_private.memory_applied_writes w
                                                  where w.user_id = p_user_id and w.write_id = p_write_id), '{}'))
                                with ordinality as r(id, ord)
                 cross join lateral (select * from public.user_memory u
                                      where u.id = r.id and u.user_id = p_user_id) as m
                 order by r.ord;
            return;
        end if;
    end if;

    -- The `%` operator's threshold, for this transaction only: the trigram index then returns only rows at
    -- least as similar as the threshold, and similarity() below confirms each one exactly.
    if p_near_duplicate_threshold <= 1 then
        perform set_config('pg_trgm.similarity_threshold', greatest(p_near_duplicate_threshold, 0)::text, true);
    end if;

    with raw as (
        select e.ord, i.*
          from jsonb_array_elements(p_items) with ordinality as e(item, ord),
               jsonb_to_record(e.item) as i(
                   kind text, category text, content text, confidence real, source text, importance smallint,
                   source_message_ids text[], session_id text, attributes jsonb, content_hash text,
                   occurred_at timestamptz, expires_at timestamptz, metadata jsonb,
                   slot text, match_key text, match_guard text, match_words text[], replaces uuid)
    ),
    -- materialized: target_hash is used three times below (partition, order, distinct); inlined, its index
    -- probe would run once per use.
    targets as materialized (
        select r.*,
               coalesce(
                   -- a stored row with the same hash (current or not: a repeat revives it)
                   (select m.content_hash from public.user_memory m
                     where m.user_id = p_user_id and m.content_hash = r.content_hash),
                   case when r.kind = 'fact' and r.match_key is not null and r.match_guard is not null
                             and r.match_words is not null and p_near_duplicate_threshold <= 1 then
                       (select m.content_hash from public.user_memory m
                         where m.user_id = p_user_id and m.kind = 'fact'
                           and m.invalid_at is null and m.archived_at is null
                           and (m.expires_at is null or m.expires_at > v_now)
                           and m.category = r.category and m.match_guard = r.match_guard
                           and m.match_key operator(extensions.%) r.match_key
                           -- words added or dropped, none swapped; and never the fact it replaces
                           and (m.match_words operator(pg_catalog.<@) r.match_words
                                or r.match_words operator(pg_catalog.<@) m.match_words)
                           and m.id is distinct from r.replaces
                           and extensions.similarity(m.match_key, r.match_key) >= p_near_duplicate_threshold
                         order by extensions.similarity(m.match_key, r.match_key) desc, m.last_reinforced_at desc, m.id
                         limit 1)
                   end,
                   r.content_hash) as target_hash
          from raw r
    ),
    folded as (
        -- One row per target: the item that matches it exactly (or the first), with what the others add.
        select distinct on (t.target_hash) t.*,
               count(*) over w as n,
               max(t.confidence) over w as max_confidence,
               max(t.importance) over w as max_importance,
               bool_or(t.source = 'explicit') over w as any_explicit,
               min(t.occurred_at) over w as first_occurred,
               bool_or(t.expires_at is null) over w as never_expires,
               max(t.expires_at) over w as last_expires,
               jsonb_agg(to_jsonb(coalesce(t.source_message_ids, '{}'))) over w as all_ids,
               (array_agg(t.replaces) filter (where t.replaces is not null) over w)[1] as any_replaces
          from targets t
        window w as (partition by t.target_hash order by t.ord rows between unbounded preceding and unbounded following)
         order by t.target_hash, (t.target_hash = t.content_hash) desc, t.ord
    ),
    written as (
        insert into public.user_memory as m (
            user_id, kind, category, content, confidence, source, importance,
            source_message_ids, session_id, attributes, content_hash, created_at, last_reinforced_at,
            occurred_at, expires_at, metadata, slot, match_key, match_guard, match_words
        )
        select p_user_id, f.kind, f.category, f.content, f.max_confidence,
               case when f.any_explicit then 'explicit' else coalesce(f.source, 'inferred') end, f.max_importance,
               case when f.n = 1 then coalesce(f.source_message_ids, '{}')
                    else array(select x.id from jsonb_array_elements(f.all_ids) with ordinality as a(arr, i),
                                                jsonb_array_elements_text(a.arr) with ordinality as x(id, j)
                                group by x.id order by min(a.i * 1000000 + x.j)) end,
               f.session_id, coalesce(f.attributes, '{}'::jsonb), f.target_hash,
               coalesce(f.first_occurred, v_now), coalesce(f.first_occurred, v_now),
               f.first_occurred, case when f.never_expires then null else f.last_expires end,
               coalesce(f.metadata, '{}'::jsonb), f.slot, f.match_key, f.match_guard, f.match_words
          from folded f
        on conflict (user_id, content_hash) do update set
            content            = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                      then excluded.content else m.content end,
            confidence         = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                           and lower(m.content) <> lower(excluded.content)
                                      then excluded.confidence
                                      else least(1.0, greatest(m.confidence, excluded.confidence) + p_reinforcement_step) end,
            relevance_count    = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                           and lower(m.content) <> lower(excluded.content)
                                      then 0 else m.relevance_count + 1 end,
            importance         = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                           and lower(m.content) <> lower(excluded.content)
                                      then excluded.importance else greatest(m.importance, excluded.importance) end,
            source             = case when m.source = 'explicit' or excluded.source = 'explicit'
                                      then 'explicit' else 'inferred' end,
            source_message_ids = (select ids[greatest(1, cardinality(ids) - 49):]
                                  from (select m.source_message_ids || array(
                                            select x from unnest(excluded.source_message_ids) as x
                                            where not x = any(m.source_message_ids)) as ids) as merged),
            session_id         = coalesce(excluded.session_id, m.session_id),
            attributes         = m.attributes || excluded.attributes,
            last_reinforced_at = greatest(m.last_reinforced_at, excluded.last_reinforced_at),
            occurred_at        = least(m.occurred_at, excluded.occurred_at),
            expires_at         = case when m.expires_at is null or excluded.expires_at is null then null
                                      else greatest(m.expires_at, excluded.expires_at) end,
            metadata           = m.metadata || excluded.metadata,
            invalid_at         = null,
            superseded_by      = null,
            archived_at        = null,
            -- The stored wording keeps its own keys; a row stored without keys takes the item's.
            slot               = coalesce(m.slot, excluded.slot),
            match_key          = case when m.match_guard is null then excluded.match_key else m.match_key end,
            match_guard        = coalesce(m.match_guard, excluded.match_guard),
            match_words        = case when m.match_words is null then excluded.match_words else m.match_words end
        returning m.id, m.content_hash, m.kind, m.slot
    ),
    -- Each written row's item (position, `replaces`). Measured with 1,000 items: this join is hashed (40 ms for
    -- the whole statement); a jsonb map of hash -> item instead cost 150 ms (the map
    -- is copied at every lookup).
    joined as (
        select w.id, w.kind, w.slot, f.ord, f.any_replaces as replaces
          from written w join folded f on f.target_hash = w.content_hash
    )
    select coalesce(array_agg(j.id order by j.ord), '{}'),
           coalesce(array_agg(j.replaces order by j.ord) filter (where j.replaces is not null and j.replaces <> j.id),
                    '{}'),
           coalesce(array_agg(j.id order by j.ord) filter (where j.replaces is not null and j.replaces <> j.id), '{}'),
           coalesce(array_agg(distinct j.slot) filter (where j.kind = 'fact' and j.slot is not null), '{}')
      into v_written, v_replaced, v_replacer, v_slots
      from joined j;

    -- 2. `replaces`: the named current facts of this user, other than the rows just written.
    if cardinality(v_replaced) > 0 then
        with superseded as (
            update public.user_memory m
               set invalid_at    = greatest(m.created_at, n.last_reinforced_at),
                   superseded_by = n.id,
                   content_hash  = m.content_hash || ':superseded:' || m.id::text
              -- Several items naming one fact: the last one said replaces it (without this the update would
              -- take any of them, by plan).
              from (select distinct on (r.old_id) r.old_id, r.new_id
                      from unnest(v_replaced, v_replacer) with ordinality as r(old_id, new_id, pos)
                     order by r.old_id, r.pos desc) x
              join public.user_memory n on n.id = x.new_id
             where m.id = x.old_id and m.user_id = p_user_id and m.kind = 'fact'
               and m.invalid_at is null and m.archived_at is null and not (m.id = any(v_written))
            returning m.id
        )
        select coalesce(array_agg(s.id), '{}') into v_more from superseded s;
        v_gone := v_gone || v_more;
    end if;

    -- 3. slots: the latest stated current fact of each slot written wins (one written now, on a tie).
    if cardinality(v_slots) > 0 then
        with winners as (
            select distinct on (c.slot) c.slot, c.id, c.last_reinforced_at
              from public.user_memory c
             where c.user_id = p_user_id and c.kind = 'fact' and c.slot = any(v_slots)
               and c.invalid_at is null and c.archived_at is null and (c.expires_at is null or c.expires_at > v_now)
             order by c.slot, c.last_reinforced_at desc, (c.id = any(v_written)) desc, c.id
        ),
        superseded as (
            update public.user_memory m
               set invalid_at    = greatest(m.created_at, w.last_reinforced_at),
                   superseded_by = w.id,
                   content_hash  = m.content_hash || ':superseded:' || m.id::text
              from winners w
             where m.user_id = p_user_id and m.kind = 'fact' and m.slot = w.slot and m.id <> w.id
               and m.invalid_at is null and m.archived_at is null and (m.expires_at is null or m.expires_at > v_now)
            returning m.id
        )
        select coalesce(array_agg(s.id), '{}') into v_more from superseded s;
        v_gone := v_gone || v_more;
    end if;

    if p_write_id is not null then
        update memory_private.memory_applied_writes set record_ids = v_written || v_gone
         where user_id = p_user_id and write_id = p_write_id;
    end if;

    -- lateral: one primary-key lookup per row (a plain join may be planned as a scan of the whole table).
    return query
        select m.* from unnest(v_written || v_gone) with ordinality as r(id, ord)
         cross join lateral (select * from public.user_memory u where u.id = r.id) as m
         order by r.ord;
end;
$$;

comment on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) is
    'Insert or reinforce a batch of memory items in one statement (exact and near-duplicate de-duplication, replaces, slots); with p_write_id, applied at most once.';


-- memory_set_embeddings: store vectors for a user's facts, found by content_hash (so it works right after
-- memory_upsert_items, and on replay of a journaled write, without knowing the row ids). p_items:
-- [{"content_hash": ..., "content": the text embedded, "embedding": [384 floats]}]. A vector computed from a
-- text the fact no longer has is ignored. Returns how many facts got a vector.
create function public.memory_set_embeddings(p_user_id uuid, p_model text, p_items jsonb)
    returns integer
    language sql
    security invoker
    set search_path = ''
as $$
    with updated as (
        update public.memory_search_docs d
           set embedding = i.embedding::extensions.halfvec(384), embedding_model = p_model, embedded_at = now()
          from jsonb_to_recordset(p_items) as i(content_hash text, content text, embedding text),
               public.user_memory m
         where m.user_id = p_user_id and m.content_hash = i.content_hash and m.kind = 'fact'
           and d.memory_id = m.id and d.user_id = p_user_id and d.content = i.content
        returning 1
    )
    select count(*)::integer from updated;
$$;


-- memory_upsert_embedded: memory_upsert_items (same arguments and result), then the vectors the items carry
-- ("embedding": [...]), in one round trip and one transaction: what the plugin calls when it writes facts
-- with an embedder configured. A vector lands only on a fact whose text it was computed from
-- (memory_set_embeddings): an item merged into a near-duplicate worded otherwise leaves that fact's vector alone.
--
-- Near-duplicates by embedding, a first pass over the items before memory_upsert_items: a fact item with a
-- vector and no stored row of its own hash gets the content_hash of the nearest current fact of the same user,
-- category, guard and model whose vector is at least p_embedding_threshold similar (cosine), other than the
-- fact it `replaces`; memory_upsert_items then applies it as a repeat of that row. Rewriting the hash reuses
-- memory_upsert_items' folding, write_id bookkeeping, `replaces` and slots unchanged, and keeps that function
-- free of vectors (it is also called without any). Order for one item: the same hash, then the nearest
-- vector (here), then trigrams (memory_upsert_items). The same rule in Python: memory_plugin/quality/semantic.py.
--
-- The nearest fact is found by an exact scan of the user's current facts of the item's category and guard
-- (the GiST index user_memory_fact_match_idx leads with user_id, category, match_guard), each joined to its
-- vector by primary key. Not HNSW: it cannot filter by user, category or guard inside the graph, and the
-- candidates of one item are few (a guard with a number or a value splits a user's facts finely). Items
-- without match keys (`remember`, verbatim notes) are never merged.
create function public.memory_upsert_embedded(
    p_user_id uuid,
    p_items jsonb,
    p_reinforcement_step real default 0.1,
    p_write_id uuid default null,
    p_near_duplicate_threshold real default 0.8,
    p_model text default null,
    p_embedding_threshold real default 0.85
)
    returns setof public.user_memory
    language plpgsql
    security invoker
    set search_path = ''
    -- As memory_upsert_items: its statements planned once per connection. Except the first pass (EXECUTE,
    -- planned at each call with the call's values): a generic plan made on a user's first write, when the
    -- tables look empty, scanned all of the user's facts per item (+17 ms a write at 1,000 facts of one guard).
    set plan_cache_mode = force_generic_plan
as $$
declare
    v_ids   uuid[];
    v_items jsonb := p_items;
    v_now   timestamptz := now();
begin
    -- A replayed write (known write_id) changes nothing: memory_upsert_items returns its rows as they are.
    if p_model is not null and p_embedding_threshold <= 1
       and (p_write_id is null
            or not exists (select from memory_private.memory_applied_writes w
                            where w.user_id = p_user_id and w.write_id = p_write_id)) then
        execute $sql$
        select jsonb_agg(case when t.target is null then e.item
                              else e.item || jsonb_build_object('content_hash', t.target) end
                         order by e.ord)
          from jsonb_array_elements($1) with ordinality as e(item, ord)
          -- A stored row of the item's own hash is a repeat, left to memory_upsert_items. (A scalar probe of the
          -- unique key: written as NOT EXISTS, the generic plan hashed all of the user's rows per call.)
          left join lateral (
              select (e.item ->> 'embedding')::extensions.halfvec(384) as vec
               where e.item ->> 'kind' = 'fact' and e.item ? 'embedding'
                 and e.item ->> 'match_guard' is not null
                 and (select x.id from public.user_memory x
                       where x.user_id = $2 and x.content_hash = e.item ->> 'content_hash') is null
          ) as q on true
          left join lateral (
              select m.content_hash as target
                from public.user_memory m
                join public.memory_search_docs d on d.user_id = $2 and d.memory_id = m.id
               where q.vec is not null
                 and m.user_id = $2 and m.kind = 'fact'
                 and m.invalid_at is null and m.archived_at is null
                 and (m.expires_at is null or m.expires_at > $5)
                 and m.category = e.item ->> 'category' and m.match_guard = e.item ->> 'match_guard'
                 and m.id is distinct from (e.item ->> 'replaces')::uuid
                 -- not `=`: as an index condition it made the (user_id, embedding_model) index look as good as
                 -- the primary key, and each candidate read all of the user's vectors (64 ms a write at 1,000
                 -- facts of one guard); this way each candidate's vector is one primary-key lookup.
                 and d.embedding_model is not distinct from $3
                 and 1 - (d.embedding operator(extensions.<=>) q.vec) >= $4
               order by d.embedding operator(extensions.<=>) q.vec, m.last_reinforced_at desc, m.id
               limit 1
          ) as t on true
        $sql$ into v_items using p_items, p_user_id, p_model, p_embedding_threshold, v_now;
    end if;

    select array_agg(w.id order by w.ordinality) into v_ids
      from public.memory_upsert_items(p_user_id, v_items, p_reinforcement_step, p_write_id,
                                      p_near_duplicate_threshold) with ordinality as w;
    -- Neighbours follow the order the items were given (memory_upsert_items inserts by content hash), re-made
    -- for the facts this write inserted (a repeat keeps its neighbours; an item merged into a near-duplicate
    -- finds no row of its own hash).
    with batch as (
        select m.id, m.session_id, i.ord
          from jsonb_array_elements(p_items) with ordinality as i(item, ord)
          join public.user_memory m on m.user_id = p_user_id and m.content_hash = i.item ->> 'content_hash'
         where i.item ->> 'kind' = 'fact' and m.session_id is not null and m.relevance_count = 0
           and m.id = any(v_ids)
    ),
    linked as (
        select b.id,
               coalesce(lag(b.id) over (partition by b.session_id order by b.ord),
                        (select p.memory_id from public.memory_search_docs p
                          where p.user_id = p_user_id and p.session_id = b.session_id
                            and not p.memory_id = any(v_ids)
                          order by p.seq desc limit 1)) as prev_id
          from batch b
    )
    update public.memory_search_docs d set prev_memory_id = l.prev_id
      from linked l
     where d.user_id = p_user_id and d.memory_id = l.id and d.prev_memory_id is distinct from l.prev_id;
    -- The items' own vectors (p_items: an item merged into a fact worded otherwise finds no row of its hash,
    -- so the stored fact keeps its vector).
    if p_model is not null then
        perform public.memory_set_embeddings(
            p_user_id, p_model,
            coalesce((select jsonb_agg(i) from jsonb_array_elements(p_items) as i where i ? 'embedding'
                                                                                    and i ->> 'kind' = 'fact'),
                     '[]'::jsonb));
    end if;
    -- lateral: one primary-key lookup per row (with a generic plan a join was a scan of the whole table).
    return query
        select m.* from unnest(v_ids) with ordinality as w(id, n)
         cross join lateral (select * from public.user_memory u where u.id = w.id) as m
         order by w.n;
end;
$$;

comment on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) is
    'memory_upsert_items plus the items'' vectors, in one round trip; a fact whose vector is close to a current fact''s (same category, guard and model) reinforces it.';

revoke all on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) from public, anon;
revoke all on function public.memory_set_embeddings(uuid, text, jsonb) from public, anon;
revoke all on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) from public, anon;
grant execute on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) to authenticated, service_role;
grant execute on function public.memory_set_embeddings(uuid, text, jsonb) to authenticated, service_role;
grant execute on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) to authenticated, service_role;


-- ==== supabase/schemas/21_memory_context.sql

-- Reads of long-term memory: memory_rank_facts (the best facts), memory_context (what a prompt needs, one
-- round trip) and memory_fact_history (facts as they stood at a time). Only current rows are read; the
-- ranking mirrors memory_plugin/ranking.py and the decay memory_plugin/quality/decay.py.

-- memory_rank_facts: the user's p_limit best facts by score over the decayed confidence, exact, from the index
-- alone:
--     decayed   = confidence * 2^(-age / half_life[category])   (age since last_reinforced_at; no half-life: 1)
--     recency   = clamp(1 - age / p_recency_window_days, 0, 1)
--     score     = w_importance * importance/5 + w_confidence * decayed + w_recency * recency
-- Facts whose decayed confidence is below p_decay_floor, rejections, and non-current facts are not ranked.
-- Without scoring every fact of the user, so the cost does not grow with the length of the history:
--  1. a seed, per importance level, of the p_limit most confident facts and the 4 * p_limit most recently
--     reinforced ones (recent facts have barely decayed and earn the recency bonus, so they score near the
--     top; with the most confident alone, the bar was 0.1 lower and the range below 4 times longer), each
--     scored exactly, gives a bar: the p_limit-th best seed score, which the final p_limit all reach;
--  2. a fact scores at most w_i * level/5 + w_c * confidence + w_r (decay and recency are at most 1), so
--     per level only facts with confidence >= (bar - w_r - w_i * level/5) / w_c can reach the bar: one
--     short range scan of the index per level, scored exactly, of which the best p_limit are returned.
-- Cost: the facts at the top levels whose stored confidence is near the best decayed scores, about 400 of
-- 10,000 (bench/run.py, table (b)). Stale facts leave the index when maintenance archives them.
-- float8 arithmetic throughout (numeric is several times slower); the 1e-6 slack keeps float4 confidence
-- rounding from excluding a fact that ties the bar. exp() is clamped at -700: PostgreSQL raises an error on
-- float underflow rather than returning 0. The CASE lists the ranked categories of user_memory's check
-- constraint (rejections are not ranked).
create function public.memory_rank_facts(
    p_user_id uuid,
    p_limit integer,
    p_weight_importance real,
    p_weight_confidence real,
    p_weight_recency real,
    p_recency_window_days real,
    p_now timestamptz,
    p_half_life_days jsonb default '{}',
    p_decay_floor real default 0
)
    returns table (id uuid, score double precision, last_reinforced_at timestamptz)
    language sql
    stable
    rows 12
    security invoker
    set search_path = ''
as $$
    with params as (
        select p_weight_importance::float8 / 5 as wi,
               p_weight_confidence::float8 as wc,
               p_weight_recency::float8 as wr,
               greatest(p_recency_window_days::float8 * 86400, 1e-9) as window_s,
               date_part('epoch', p_now) as now_s,
               p_now - make_interval(secs => greatest(p_recency_window_days::float8, 0) * 86400) as cutoff,
               greatest(coalesce(p_decay_floor, 0)::float8, 0) as floor,
               -- decay rates per second, ln 2 / half-life (0: no decay), read from the JSON once per call: a
               -- CASE on the category costs 0.17 ms less per call than a JSON lookup per scored fact.
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'preference')::float8, 0), 0) / 86400, 0) as r_preference,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'requirement')::float8, 0), 0) / 86400, 0) as r_requirement,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'constraint')::float8, 0), 0) / 86400, 0) as r_constraint,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'feedback')::float8, 0), 0) / 86400, 0) as r_feedback,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'goal')::float8, 0), 0) / 86400, 0) as r_goal,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'routine')::float8, 0), 0) / 86400, 0) as r_routine,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'contact')::float8, 0), 0) / 86400, 0) as r_contact,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'health_note')::float8, 0), 0) / 86400, 0) as r_health_note,
               coalesce(ln(2) / nullif(greatest((p_half_life_days ->> 'fact')::float8, 0), 0) / 86400, 0) as r_fact
    ),
    -- union, not union all: a fact in both halves must count once towards the bar.
    seed as (
        select s.* from params p, generate_series(1, 5) as level(importance),
             lateral (select f.id, f.last_reinforced_at,
                             p.wi * f.importance + p.wc * d.decayed
                           + p.wr * least(1, greatest(0, 1 - (p.now_s - date_part('epoch', f.last_reinforced_at))
                                                             / p.window_s)) as score
                        from public.user_memory f,
                             lateral (select f.confidence * exp(greatest(-700,
                                         -greatest(0, p.now_s - date_part('epoch', f.last_reinforced_at))
                                         * case f.category when 'preference' then p.r_preference
                                                           when 'requirement' then p.r_requirement
                                                           when 'constraint' then p.r_constraint
                                                           when 'feedback' then p.r_feedback
                                                           when 'goal' then p.r_goal
                                                           when 'routine' then p.r_routine
                                                           when 'contact' then p.r_contact
                                                           when 'health_note' then p.r_health_note
                                                           when 'fact' then p.r_fact
                                                           else 0 end))
                                         as decayed) as d
                       where f.user_id = p_user_id and f.kind = 'fact' and f.importance = level.importance
                         and f.invalid_at is null and f.archived_at is null and f.category <> 'rejection'
                         and (f.expires_at is null or f.expires_at > p_now)
                         and d.decayed >= p.floor
                       order by f.confidence desc, f.last_reinforced_at desc, f.id
                       limit p_limit) as s
        union
        select s.* from params p, generate_series(1, 5) as level(importance),
             lateral (select f.id, f.last_reinforced_at,
                             p.wi * f.importance + p.wc * d.decayed
                           + p.wr * least(1, greatest(0, 1 - (p.now_s - date_part('epoch', f.last_reinforced_at))
                                                             / p.window_s)) as score
                        from public.user_memory f,
                             lateral (select f.confidence * exp(greatest(-700,
                                         -greatest(0, p.now_s - date_part('epoch', f.last_reinforced_at))
                                         * case f.category when 'preference' then p.r_preference
                                                           when 'requirement' then p.r_requirement
                                                           when 'constraint' then p.r_constraint
                                                           when 'feedback' then p.r_feedback
                                                           when 'goal' then p.r_goal
                                                           when 'routine' then p.r_routine
                                                           when 'contact' then p.r_contact
                                                           when 'health_note' then p.r_health_note
                                                           when 'fact' then p.r_fact
                                                           else 0 end))
                                         as decayed) as d
                       where f.user_id = p_user_id and f.kind = 'fact' and f.importance = level.importance
                         and f.invalid_at is null and f.archived_at is null and f.category <> 'rejection'
                         and (f.expires_at is null or f.expires_at > p_now)
                         and d.decayed >= p.floor
                       order by f.last_reinforced_at desc, f.id
                       limit 4 * p_limit) as s
    ),
    -- materialized: computed once (inlined, RLS's wrapper would re-run it for every importance level).
    bar as materialized (
        select coalesce((select s.score from seed s order by s.score desc offset greatest(p_limit, 1) - 1 limit 1),
                        '-infinity'::float8) as score
    ),
    bounds as materialized (
        select level.importance,
               greatest(case when p.wc <= 0 then '-infinity'::float8
                             else (bar.score - p.wr - p.wi * level.importance) / p.wc - 1e-6 end,
                        p.floor - 1e-6) as min_confidence
          from params p, bar, generate_series(1, 5) as level(importance)
    ),
    candidates as (
        select c.* from params p, bounds b,
             lateral (select f.id, f.last_reinforced_at,
                             p.wi * f.importance + p.wc * d.decayed
                           + p.wr * least(1, greatest(0, 1 - (p.now_s - date_part('epoch', f.last_reinforced_at))
                                                             / p.window_s)) as score
                        from public.user_memory f,
                             lateral (select f.confidence * exp(greatest(-700,
                                         -greatest(0, p.now_s - date_part('epoch', f.last_reinforced_at))
                                         * case f.category when 'preference' then p.r_preference
                                                           when 'requirement' then p.r_requirement
                                                           when 'constraint' then p.r_constraint
                                                           when 'feedback' then p.r_feedback
                                                           when 'goal' then p.r_goal
                                                           when 'routine' then p.r_routine
                                                           when 'contact' then p.r_contact
                                                           when 'health_note' then p.r_health_note
                                                           when 'fact' then p.r_fact
                                                           else 0 end))
                                         as decayed) as d
                       where f.user_id = p_user_id and f.kind = 'fact' and f.importance = b.importance
                         and f.invalid_at is null and f.archived_at is null and f.category <> 'rejection'
                         and (f.expires_at is null or f.expires_at > p_now)
                         and f.confidence >= b.min_confidence
                         and d.decayed >= p.floor
                      -- offset 0 keeps this a range scan per level; flattened, the planner may prefer one
                      -- hash join over every fact, which is what this function exists to avoid.
                      offset 0) as c
    )
    select c.id, c.score, c.last_reinforced_at
      from candidates c
     order by c.score desc, c.last_reinforced_at desc, c.id
     limit p_limit;
$$;

comment on function public.memory_rank_facts is
    'The best-ranked current facts of a user (importance, decayed confidence, recency), exact, read from indexes only.';

-- memory_context: what get_memory_context needs for one user, in one round trip: the best-ranked facts
-- (memory_rank_facts), the user's current rejections ("never suggest X", newest first, at most
-- p_max_rejections) right after them, since they always reach the prompt whatever their rank, every
-- preference value, the latest projects and the most frequent patterns. Decay as in memory_rank_facts; its
-- defaults (no decay) rank by stored confidence.
create function public.memory_context(
    p_user_id uuid,
    p_max_facts integer default 12,
    p_max_projects integer default 3,
    p_max_patterns integer default 3,
    p_weight_importance real default 0.6,
    p_weight_confidence real default 0.3,
    p_weight_recency real default 0.1,
    p_recency_window_days real default 30,
    p_now timestamptz default now(),
    p_half_life_days jsonb default '{}',
    p_decay_floor real default 0,
    p_max_rejections integer default 20
)
    returns setof public.user_memory
    language sql
    stable
    security invoker
    set search_path = ''
as $$
    (select m.* from public.memory_rank_facts(p_user_id, p_max_facts, p_weight_importance, p_weight_confidence,
                                              p_weight_recency, p_recency_window_days, p_now,
                                              p_half_life_days, p_decay_floor) as best
       cross join lateral (select * from public.user_memory u where u.id = best.id) as m
      order by best.score desc, best.last_reinforced_at desc, best.id)
    union all
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'fact' and m.category = 'rejection'
        and m.invalid_at is null and m.archived_at is null and (m.expires_at is null or m.expires_at > p_now)
      order by m.last_reinforced_at desc, m.id
      limit p_max_rejections)
    union all
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'preference'
        and m.invalid_at is null and m.archived_at is null and (m.expires_at is null or m.expires_at > p_now)
      order by m.last_reinforced_at desc, m.id
      limit 100)
    union all
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'project'
        and m.invalid_at is null and m.archived_at is null and (m.expires_at is null or m.expires_at > p_now)
      order by m.created_at desc, m.id
      limit p_max_projects)
    union all
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'pattern'
        and m.invalid_at is null and m.archived_at is null and (m.expires_at is null or m.expires_at > p_now)
      order by m.relevance_count desc, m.last_reinforced_at desc, m.id
      limit p_max_patterns);
$$;


-- memory_fact_history: the user's facts as they stood at p_at ("what did the user prefer in March?"): learned
-- by then (created_at <= p_at), not yet invalid (invalid_at null or later) and not expired then. Without p_at,
-- every fact. p_include_invalid = false leaves out facts that are no longer valid now. Newest first.
create function public.memory_fact_history(
    p_user_id uuid,
    p_at timestamptz default null,
    p_include_invalid boolean default true,
    p_limit integer default 1000
)
    returns setof public.user_memory
    language sql
    stable
    security invoker
    set search_path = ''
as $$
    select * from public.user_memory m
     where m.user_id = p_user_id and m.kind = 'fact'
       and (p_at is null or (m.created_at <= p_at
                             and (m.invalid_at is null or m.invalid_at > p_at)
                             and (m.expires_at is null or m.expires_at > p_at)))
       and (p_include_invalid or m.invalid_at is null)
     order by m.created_at desc, m.id
     limit p_limit;
$$;

revoke all on function public.memory_rank_facts(uuid, integer, real, real, real, real, timestamptz, jsonb, real) from public, anon;
revoke all on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz, jsonb, real, integer) from public, anon;
revoke all on function public.memory_fact_history(uuid, timestamptz, boolean, integer) from public, anon;
grant execute on function public.memory_rank_facts(uuid, integer, real, real, real, real, timestamptz, jsonb, real) to authenticated, service_role;
grant execute on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz, jsonb, real, integer) to authenticated, service_role;
grant execute on function public.memory_fact_history(uuid, timestamptz, boolean, integer) to authenticated, service_role;


-- memory_fact_count: how many fact rows the user has (current and history), for the per-user fact limit
-- (MEMORY_MAX_FACTS_PER_USER). Read once per user and process, then kept up to date by the writer: an
-- index-only count, ~10 ms at 100,000 facts.
create function public.memory_fact_count(p_user_id uuid)
    returns bigint
    language sql
    stable
    security invoker
    set search_path = ''
as $$
    select count(*) from public.user_memory m where m.user_id = p_user_id and m.kind = 'fact';
$$;

revoke all on function public.memory_fact_count(uuid) from public, anon;
grant execute on function public.memory_fact_count(uuid) to authenticated, service_role;


-- ==== supabase/schemas/22_memory_search.sql

-- Query-aware retrieval: memory_search fuses vector, BM25 and trigram relevance with the fact's own weight
-- (importance, confidence, recency) in one round trip; memory_embedding_backlog lists facts without a vector.
-- bench/locomo.py measures the ranking, bench/retrieval_latency.py its cost at scale.

-- memory_search: the user's p_limit best valid, unexpired facts for a question, with the parts of each score.
--
-- 1. Candidates (each channel at most p_candidates facts): nearest vectors of p_model, best BM25 matches
--    (memory_private.memory_search_terms; at most p_text_scan_limit postings per word are read, bounding the
--    cost of very common words), and facts stated inside a date the question names.
-- 2. Relevance of each candidate, a weighted sum (weights calibrated on LoCoMo's development split, see
--    memory_plugin/retrieval/weights.py; reciprocal-rank fusion measured 0.05 lower recall@10):
--      text      BM25 / the best BM25 among the candidates (0–1)
--      vector    cosine similarity to the question
--      neighbour best cosine similarity of the fact just before or after it in its session (a question
--                often spans a question/answer pair of turns)
--      trigram   word_similarity(question, text) (typos, partial names)
--      speaker   1 when the fact's metadata.speaker is the one person the question names
--      date      1 inside a date window of the question, falling linearly to 0 p_date_slack_days away
--      time      1 when the question asks "when" (p_asks_when) and the text holds a time expression
-- 3. Score = relevance + w_importance * importance/5 + w_confidence * confidence + w_recency * recency
--    (recency falls linearly to 0 over p_recency_window_days since last reinforcement).
--
-- The vector channel: an exact scan of the user's vectors, or HNSW with hnsw.iterative_scan (so the user
-- filter does not starve the result), whichever costs less. HNSW with a user filter walks the graph until
-- enough of the user's rows turn up, so its cost follows the user's share of their partition, not their
-- size. Raw SQL, p50 ms of the vector statement, HNSW / exact:
--   100k facts, 81 % of their partition          2.4 / 56.6
--   10k facts, 43 %                              2.8 /  6.2
--   10k facts in the 100k user's partition, 8 %  17.8 / 5.3
--   3k facts in the 100k user's partition, 2 %   29.6 / 1.8
--   3k facts, 20 %                               3.4 / 1.4
-- So the scan is exact when the user's rows are fewer than p_exact_scan_below * max(1, v_vk / (share *
-- ef_search)), i.e. when reading them costs less than the walk that would find v_vk of them: every row above
-- chooses the faster side. The user's count comes from memory_private.memory_search_counts, the partition's
-- size from the planner's statistics. HNSW takes half the candidates (at least p_limit), with ef_search 1.5
-- times that (at least 40, pgvector's default): with ef_search = k one pass rarely yielded k of the user's
-- rows and the scan walked the graph twice; 2x instead of 1.5x cost 0.3 ms more at 100k facts for the same
-- top 10. The fused score re-ranks the candidates, so HNSW's approximate order does not matter.
-- Planning: every statement but the two vector ones runs a generic plan (`plan_cache_mode` is set for the
-- function only): custom plans re-planned a nine-way join over sixteen partitions on every call, 0.4-1.0 ms.
-- The vector statements are EXECUTEd, planned with the user, the question's vector and the limit known: a
-- generic plan of the HNSW statement skipped the index (104 ms at 100k facts).
-- Latency with bench/retrieval_latency.py (a 100k-fact user among 200k rows of other users): bench/README.md.
create function public.memory_search(
    p_user_id uuid,
    p_query text,
    p_embedding extensions.vector(384) default null,
    p_model text default null,
    p_limit integer default 10,
    p_candidates integer default 50,
    p_weight_text real default 1.0,
    p_weight_vector real default 1.0,
    p_weight_neighbour real default 0.5,
    p_weight_trigram real default 0.0,
    p_weight_speaker real default 0.2,
    p_weight_date real default 0.2,
    p_weight_time real default 0.1,
    p_weight_importance real default 0.05,
    p_weight_confidence real default 0.05,
    p_weight_recency real default 0.05,
    p_recency_window_days real default 30,
    p_date_from timestamptz[] default '{}',
    p_date_to timestamptz[] default '{}',
    p_months integer[] default '{}',
    p_asks_when boolean default false,
    p_date_slack_days real default 14,
    p_exact_scan_below integer default 2000,
    p_text_scan_limit integer default 500,
    p_now timestamptz default now()
)
    returns table (
        memory jsonb,
        score double precision,
        text_score double precision,
        vector_score double precision,
        neighbour_score double precision,
        trigram_score double precision,
        speaker_score double precision,
        date_score double precision,
        time_score double precision,
        importance_score double precision,
        confidence_score double precision,
        recency_score double precision
    )
    language plpgsql
    stable
    security invoker
    set search_path = ''
    set plan_cache_mode = force_generic_plan
    -- Every statement here reads by index. The exact vector scan, planned with the user's share of the
    -- partition known, chose a sequential scan of the whole partition at a 20 % share (7 ms for 3,000
    -- vectors, 1.4 ms by the (user_id, embedding_model) index), a cost that grows with other users' rows.
    set enable_seqscan = off
    -- The planner put a Memoize node over each word's postings in the BM25 statement, keyed by the word's
    -- whole posting arrays: hashed once per word and never hit (each word is read once). Without it the
    -- statement takes 1.35 instead of 1.5 ms at 100k facts; no other statement here used one.
    set enable_memoize = off
as $$
declare
    v_k integer := greatest(p_candidates, p_limit);
    v_q extensions.halfvec(384) := p_embedding::extensions.halfvec(384);
    v_docs integer;
    v_rows real;
    v_share float8 := 1;
    v_vk integer;
    v_ef integer;
    v_vec_ids uuid[] := '{}';
    v_ids uuid[] := '{}';
    v_ranks float8[] := '{}';
    -- The question's lexemes, as the facts' were made (memory_private.memory_search_terms).
    v_terms text[] := tsvector_to_array(memory_private.memory_tsvector(p_query));
    v_qtext text := lower(extensions.unaccent('extensions.unaccent'::regdictionary, p_query));
begin
    if p_embedding is not null and p_model is not null then
        -- Half the candidates through HNSW (at least p_limit), with ef_search 1.5 times that (at least 40,
        -- pgvector's default): see the header.
        v_vk := greatest(p_limit, v_k / 2);
        v_ef := least(greatest(v_vk + v_vk / 2, 40), 1000);
        -- Exact scan or HNSW, by their cost. The exact scan reads the user's vectors: cost ~ v_docs. The HNSW
        -- walk visits the whole partition's graph and keeps the user's rows: one ef_search pass when most rows
        -- are the user's, about v_vk / share tuples when few are (a 10k-fact user sharing a partition with a
        -- 100k-fact one, share 8 %: 18 ms through HNSW, 5 ms exact). p_exact_scan_below is the break-even of
        -- a user who fills their partition; it grows as the user's share shrinks.
        -- The partition's rows from the planner's statistics (0 before its first analyze: then the user's own
        -- count stands in, share 1).
        select c.docs, greatest(p.reltuples, 0) into v_docs, v_rows
          from memory_private.memory_search_counts c left join pg_catalog.pg_class p on p.oid = c.search_partition
         where c.user_id = p_user_id;
        v_docs := coalesce(v_docs, 0);
        if v_docs > 0 then
            v_share := v_docs::float8 / greatest(coalesce(v_rows, 0)::float8, v_docs);
        end if;
        if v_docs < p_exact_scan_below * greatest(1, v_vk / (greatest(v_share, 1e-6) * v_ef)) then
            -- Exact: the `+ 0` keeps the planner off the HNSW index. Both vector statements are planned per
            -- call (EXECUTE), with the user, the question's vector and the limit known (see the header).
            execute 'select coalesce(array_agg(x.memory_id), ''{}'') from (select d.memory_id'
                    ' from public.memory_search_docs d where d.user_id = $1 and d.embedding_model = $2'
                    ' order by (d.embedding operator(extensions.<=>) $3) + 0 limit $4) as x'
               into v_vec_ids using p_user_id, p_model, v_q, v_k;
        else
            -- Iterative scan: HNSW keeps walking until enough vectors pass the user/model filter (relaxed
            -- order: the final order is the fused score's anyway).
            perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
            perform set_config('hnsw.ef_search', v_ef::text, true);
            execute 'select coalesce(array_agg(x.memory_id), ''{}'') from (select d.memory_id'
                    ' from public.memory_search_docs d where d.user_id = $1 and d.embedding_model = $2'
                    ' order by d.embedding operator(extensions.<=>) $3 limit $4) as x'
               into v_vec_ids using p_user_id, p_model, v_q, v_vk;
        end if;
    end if;

    -- BM25 over the question's words (k1 = 1.2, no length normalisation: facts are short), from the postings
    -- of each word, at most p_text_scan_limit per word. idf = ln(1 + p_text_scan_limit / df): the cap stands
    -- in for the collection size, which keeps it monotone in df without counting the user's facts. Each
    -- word's postings and document frequency come from one read, then one aggregate per fact; the same
    -- statement picks the candidates (the text channel's top v_k, the vector channel's, the dated ones) and
    -- gives each its BM25, so the ranking below joins nothing to find it. The arithmetic is float8 throughout
    -- (each word's idf once): `tf * 2.2` with a numeric literal made every posting's weight and the sum
    -- numeric, 3.5 ms against 1.4 for 1,200 postings of a 100k-fact user (the scan itself: 0.5 ms).
    with bm25 as materialized (
        select p.memory_id, sum(a.idf * p.tf * 2.2::float8 / (p.tf + 1.2::float8)) as rank
          from unnest(v_terms) as t(lexeme),
               lateral (select array_agg(s.memory_id) as ids, array_agg(s.tf) as tfs,
                               ln(1 + p_text_scan_limit::float8 / nullif(count(*), 0)) as idf
                          from (select s.memory_id, s.tf from memory_private.memory_search_terms s
                                 where s.user_id = p_user_id and s.lexeme = t.lexeme
                                 limit p_text_scan_limit) as s) as a,
               unnest(a.ids, a.tfs) as p(memory_id, tf)
         group by p.memory_id
    ),
    dated as (
        select m.id as memory_id
          from unnest(p_date_from, p_date_to) as w(date_from, date_to),
               lateral (select m.id from public.user_memory m
                         where m.user_id = p_user_id and m.kind = 'fact'
                           and m.occurred_at >= w.date_from - make_interval(days => 1)
                           and m.occurred_at < w.date_to + make_interval(days => 1)
                         order by m.occurred_at
                         limit v_k) as m
    ),
    cand as (
        select x.memory_id from (select b.memory_id from bm25 b order by b.rank desc limit v_k) as x
        union select unnest(v_vec_ids)
        union select memory_id from dated
    )
    select coalesce(array_agg(c.memory_id), '{}'), coalesce(array_agg(coalesce(b.rank, 0)), '{}')
      into v_ids, v_ranks
      from cand c left join bm25 b on b.memory_id = c.memory_id;

    return query
    with parts as (
        -- Only what the ranking needs of the fact; its jsonb is built for the returned rows alone.
        select m.id, m.importance, m.confidence, m.last_reinforced_at,
               c.rank,
               case when d.embedding_model = p_model and p_embedding is not null
                    then 1 - (d.embedding operator(extensions.<=>) v_q) else 0 end as vector_score,
               coalesce(greatest(
                   case when np.embedding_model = p_model then 1 - (np.embedding operator(extensions.<=>) v_q) end,
                   case when nn.embedding_model = p_model then 1 - (nn.embedding operator(extensions.<=>) v_q) end),
                   0) as neighbour_score,
               case when p_weight_trigram > 0
                    then extensions.word_similarity(v_qtext, lower(d.content))::float8 else 0 end as trigram_score,
               d.speaker,
               case when cardinality(p_date_from) = 0 then 0::float8 else coalesce((select max(case
                                 when m.occurred_at >= w.date_from and m.occurred_at < w.date_to then 1
                                 else greatest(0, 1 - least(abs(date_part('epoch', m.occurred_at - w.date_from)),
                                                            abs(date_part('epoch', m.occurred_at - w.date_to)))
                                                      / 86400 / greatest(p_date_slack_days, 1e-6)) end)
                           from unnest(p_date_from, p_date_to) as w(date_from, date_to)), 0)::float8 end as date_window,
               case when cardinality(p_months) > 0 and date_part('month', m.occurred_at)::integer = any(p_months)
                    then 1 else 0 end as date_month,
               case when p_asks_when and d.has_time then 1 else 0 end as time_score
          from unnest(v_ids, v_ranks) as c(memory_id, rank)
          join public.memory_search_docs d on d.memory_id = c.memory_id and d.user_id = p_user_id
          join public.user_memory m on m.id = c.memory_id and m.user_id = p_user_id
          -- The neighbours: the fact before (by its id) and the one after (whose predecessor this is).
          left join public.memory_search_docs np on np.user_id = p_user_id and np.memory_id = d.prev_memory_id
          left join lateral (select x.embedding, x.embedding_model from public.memory_search_docs x
                              where x.user_id = p_user_id and x.prev_memory_id = d.memory_id
                              limit 1) as nn on true
         where m.kind = 'fact' and m.invalid_at is null and m.archived_at is null
           and (m.expires_at is null or m.expires_at > p_now)
    ),
    named as materialized (
        -- The speakers the question names; the boost applies only when it names exactly one (a question
        -- naming both sides of a conversation says nothing about whose turn answers it).
        select array_agg(s.speaker) as speakers
          from (select distinct p.speaker from parts p where p.speaker is not null) as s
         where v_qtext ~ ('\m' || regexp_replace(s.speaker, '([^[:alnum:][:space:]])', '\\\1', 'g') || '\M')
    ),
    scored as (
        select p.id, p.last_reinforced_at,
               coalesce(p.rank / nullif(max(p.rank) over (), 0), 0) as text_score,
               p.vector_score, p.neighbour_score, p.trigram_score,
               case when cardinality(n.speakers) = 1 and p.speaker = n.speakers[1] then 1 else 0 end::float8
                   as speaker_score,
               greatest(p.date_window, p.date_month)::float8 as date_score,
               p.time_score::float8 as time_score,
               p.importance / 5.0::float8 as importance_score,
               p.confidence::float8 as confidence_score,
               least(1, greatest(0, 1 - date_part('epoch', p_now - p.last_reinforced_at)
                                      / greatest(p_recency_window_days::float8 * 86400, 1e-9))) as recency_score
          from parts p cross join named n
    )
    select to_jsonb(m), t.score, t.text_score, t.vector_score, t.neighbour_score, t.trigram_score,
           t.speaker_score, t.date_score, t.time_score, t.importance_score, t.confidence_score, t.recency_score
      from (select s.id, s.last_reinforced_at,
                   p_weight_text * s.text_score + p_weight_vector * s.vector_score
                 + p_weight_neighbour * s.neighbour_score + p_weight_trigram * s.trigram_score
                 + p_weight_speaker * s.speaker_score + p_weight_date * s.date_score + p_weight_time * s.time_score
                 + p_weight_importance * s.importance_score + p_weight_confidence * s.confidence_score
                 + p_weight_recency * s.recency_score as score,
                   s.text_score, s.vector_score, s.neighbour_score, s.trigram_score, s.speaker_score, s.date_score,
                   s.time_score, s.importance_score, s.confidence_score, s.recency_score
              from scored s
             order by 3 desc, s.last_reinforced_at desc, s.id
             limit p_limit) as t
      join public.user_memory m on m.id = t.id and m.user_id = p_user_id
     order by t.score desc, t.last_reinforced_at desc, t.id;
end;
$$;

comment on function public.memory_search is
    'Hybrid search of a user''s valid facts: vector, full-text, trigram, neighbours, speaker, dates; with the score''s parts.';



-- memory_embedding_backlog: facts of the user without a vector of p_model (reembed, and facts written while
-- the embedder was failing), oldest first.
create function public.memory_embedding_backlog(p_user_id uuid, p_model text, p_limit integer default 1000)
    returns table (memory_id uuid, content_hash text, content text)
    language sql
    stable
    security invoker
    set search_path = ''
as $$
    select d.memory_id, m.content_hash, d.content
      from public.memory_search_docs d
      join public.user_memory m on m.id = d.memory_id
     where d.user_id = p_user_id and m.user_id = p_user_id and d.embedding_model is distinct from p_model
     order by d.seq
     limit p_limit;
$$;

revoke all on function public.memory_search(uuid, text, extensions.vector, text, integer, integer, real, real, real, real,
    real, real, real, real, real, real, real, timestamptz[], timestamptz[], integer[], boolean, real, integer, integer,
    timestamptz) from public, anon;
revoke all on function public.memory_embedding_backlog(uuid, text, integer) from public, anon;
grant execute on function public.memory_search(uuid, text, extensions.vector, text, integer, integer, real, real, real,
    real, real, real, real, real, real, real, real, timestamptz[], timestamptz[], integer[], boolean, real, integer,
    integer, timestamptz) to authenticated, service_role;
grant execute on function public.memory_embedding_backlog(uuid, text, integer) to authenticated, service_role;
