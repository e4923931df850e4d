-- Query-aware retrieval: embeddings in pgvector beside their text, BM25 and trigram relevance, and one
-- function, memory_search, that fuses them and the fact's own weight (importance, confidence, recency) in one
-- round trip. README "Search and remember" explains the ranking; bench/locomo.py measures it,
-- bench/retrieval_latency.py its cost at scale.
--
-- Where the vectors live. A separate table, memory_search_docs, one row per fact, rather than columns on
-- user_memory:
--  - memory_context and memory_upsert_items return `setof user_memory` (`select *`): a 384-float vector and a
--    tsvector on every returned row would cost every context read ~1.6 kB per fact for nothing;
--  - the text that was embedded sits beside its vector (`content`), so the dashboard shows what each embedding
--    means (seed 003: anything with an embedding has its plain text beside it);
--  - the row also carries what search needs per fact (tsvector, speaker, time expressions, session and
--    insertion order for neighbours), so search joins user_memory only for the few candidates;
--  - it can be partitioned by user (below), which the HNSW index needs to stay fast as the table grows.
-- One embedding per fact, with its model: a search filters `embedding_model = p_model`, so vectors of two
-- models are never compared; after a model change `memory-plugin reembed` rewrites them (until then those
-- facts are found by text only). pgvector's HNSW needs a fixed dimension: 384 (all-MiniLM-L6-v2;
-- text-embedding-3-small is asked for dimensions=384).
--
-- Extensions go in the `extensions` schema, as on Supabase (where they are enabled there from the dashboard);
-- every function below names its schema (search_path is empty).

create schema if not exists extensions;
create extension if not exists vector with schema extensions;
create extension if not exists pg_trgm with schema extensions;
create extension if not exists unaccent with schema extensions;
grant usage on schema extensions to anon, authenticated, service_role;


-- Dates in a question ("on 13 October 2023") are matched against occurred_at.
create index user_memory_fact_occurred_idx on public.user_memory (user_id, occurred_at) where kind = 'fact';


-- The text-search configuration of facts and questions: English stemming, with English *and* Spanish stop
-- words dropped (the plugin's users write both). Measured on LoCoMo (English): English stems beat `simple` by
-- +0.09 BM25 recall@10; concatenating the `spanish` configuration as well cost -0.02 recall@10 of the fused
-- ranking, because it keeps English function words ("what", "did") as lexemes that match every turn. Spanish
-- words pass through the English stemmer unchanged or lightly trimmed, identically in facts and questions.
create text search dictionary public.memory_spanish_stopwords (
    template = pg_catalog.simple, stopwords = spanish, accept = false
);
create text search configuration public.memory_search (copy = pg_catalog.english);
alter text search configuration public.memory_search
    alter mapping for asciiword, asciihword, hword_asciipart, word, hword, hword_part
    with public.memory_spanish_stopwords, pg_catalog.english_stem;

-- memory_tsvector: the text-search form of a fact (and of a question: its lexemes are looked up). `unaccent` is only
-- `stable` (its dictionary could change), so it is wrapped with the dictionary named explicitly and declared
-- immutable, as Supabase users do, to be usable in a generated column.
create function public.memory_tsvector(p_text text) returns tsvector
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select to_tsvector('public.memory_search'::regconfig,
                       extensions.unaccent('extensions.unaccent'::regdictionary, p_text));
$$;

-- Whether a text holds a time expression ("yesterday", "last week", "el sábado", a year): computed once per
-- fact at write time (a generated column), so "when" questions pay nothing per candidate for it.
create function public.memory_has_time_expression(p_text text) returns boolean
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

-- Insertion order of facts (neighbours); a plain sequence, as identity columns on partitioned tables need
-- PostgreSQL 17.
create sequence public.memory_search_docs_seq;
grant usage on sequence public.memory_search_docs_seq to authenticated, service_role;

-- Partitioned by user (hash, 16 partitions), each partition with its own HNSW index. Why: pgvector's HNSW
-- cannot filter by user inside the graph; it walks the nearest vectors of *everyone* and drops other users'
-- rows. Measured with 20k rows of other users, a 10k-fact user (a third of the rows) cost 16 ms per vector
-- search (iterative scan) against 2 ms unfiltered. A user's search reads one partition, where the user is
-- 16 times more of the rows, so the walk finds their vectors early, whatever the table's total size.
create table public.memory_search_docs (
    memory_id       uuid        not null references public.user_memory (id) on delete cascade,
    user_id         uuid        not null,
    -- Neighbours (the turns just before and after a hit) are the previous and next fact of the same session
    -- in insertion order.
    session_id      text,
    seq             bigint      not null default nextval('public.memory_search_docs_seq'),
    -- The fact written just before this one in the same session (set once, at insert): neighbours are then
    -- primary-key lookups at search time (a range scan per candidate cost 0.04 ms, 6 ms per search).
    prev_memory_id  uuid,
    -- The fact's text, as embedded and as searched (kept equal to user_memory.content by a trigger).
    content         text        not null,
    search_tsv      tsvector    generated always as (public.memory_tsvector(content)) stored,
    has_time        boolean     generated always as (public.memory_has_time_expression(content)) stored,
    -- user_memory.metadata->>'speaker', lower-cased and unaccented: a question naming them favours their facts.
    speaker         text,
    -- halfvec (2 bytes a dimension): half the memory of float4 for the heap and the HNSW index, so a large
    -- user's partition stays in cache (at 100k facts a float4 index no longer did: 16 ms, half of it disk
    -- reads); cosine similarities differ by < 1e-3, LoCoMo recall unchanged.
    embedding       extensions.halfvec(384),
    embedding_model text,
    embedded_at     timestamptz,
    constraint memory_search_docs_pkey primary key (user_id, memory_id),
    constraint memory_search_docs_embedding_model_check check ((embedding is null) = (embedding_model is null))
) partition by hash (user_id);

-- Partitions are reached only through the table above (no grants of their own, RLS enabled as well).
do $$
begin
    for i in 0..15 loop
        execute format('create table public.memory_search_docs_p%s partition of public.memory_search_docs'
                       ' for values with (modulus 16, remainder %s)', lpad(i::text, 2, '0'), i);
        execute format('alter table public.memory_search_docs_p%s enable row level security', lpad(i::text, 2, '0'));
        execute format('revoke all on table public.memory_search_docs_p%s from anon, authenticated',
                       lpad(i::text, 2, '0'));
    end loop;
end
$$;

-- Keep vectors inside the row (pgvector's default storage moves them out of line once a row passes ~2 kB,
-- which a long text with its tsvector does): every distance computed then reads the page it is on.
alter table public.memory_search_docs alter column embedding set storage main;

comment on table public.memory_search_docs is
    'Search index of each fact (memory_plugin): its text, tsvector and embedding (with the model that made it). Maintained by triggers on user_memory; embeddings written at fact creation or by `memory-plugin reembed`. RLS: a user sees only their own rows.';
comment on column public.memory_search_docs.content is 'The plain text the embedding was computed from.';
comment on column public.memory_search_docs.embedding_model is 'The embedding model, e.g. sentence-transformers:all-MiniLM-L6-v2; searches compare only vectors of one model.';

-- HNSW per partition; memory_search filters by user with `hnsw.iterative_scan` for users with many facts and
-- scans a small user's vectors exactly (see there). m/ef_construction: pgvector's defaults.
create index memory_search_docs_embedding_idx on public.memory_search_docs
    using hnsw (embedding extensions.halfvec_cosine_ops);
-- Deleting a fact (user_memory) finds its row by memory_id alone.
create index memory_search_docs_memory_id_idx on public.memory_search_docs (memory_id);
create index memory_search_docs_user_model_idx on public.memory_search_docs (user_id, embedding_model);
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


-- memory_search_terms: the full-text index of each user's facts, as a table: one row per (user, lexeme, fact)
-- with the lexeme's frequency in the fact, in a btree. Why not a GIN index on the tsvector: under row-level
-- security PostgreSQL evaluates a query's non-leakproof conditions only after the policy's, and `@@`
-- (ts_match_vq) is not leakproof, so as `authenticated` a GIN index is never used and every search scanned
-- all of the user's facts (19 ms at 10k facts, growing linearly). Equality on text is leakproof: this btree
-- is used under RLS, reads only the postings of the question's words, and gives each word's document
-- frequency for free, hence BM25 (measured +0.005 recall@10 over ts_rank on LoCoMo).
create table public.memory_search_terms (
    user_id   uuid     not null,
    lexeme    text     not null,
    memory_id uuid     not null,
    tf        smallint not null,
    constraint memory_search_terms_pkey primary key (user_id, lexeme, memory_id) include (tf),
    constraint memory_search_terms_doc_fkey foreign key (user_id, memory_id)
        references public.memory_search_docs (user_id, memory_id) on delete cascade
);

comment on table public.memory_search_terms is
    'Full-text postings of each fact (memory_plugin): lexeme and its frequency, derived from memory_search_docs.search_tsv by a trigger. RLS: a user sees only their own rows.';

create index memory_search_terms_memory_id_idx on public.memory_search_terms (user_id, memory_id);

alter table public.memory_search_terms enable row level security;

create policy memory_search_terms_select_own on public.memory_search_terms
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_search_terms_insert_own on public.memory_search_terms
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_search_terms_update_own on public.memory_search_terms
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_search_terms_delete_own on public.memory_search_terms
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table public.memory_search_terms from anon, authenticated;
grant select, insert, update, delete on table public.memory_search_terms to authenticated;
grant all on table public.memory_search_terms to service_role;

-- A fact's postings follow its text.
create function public.memory_search_terms_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    if tg_op = 'UPDATE' then
        if new.search_tsv = old.search_tsv then
            return null;
        end if;
        delete from public.memory_search_terms t where t.user_id = new.user_id and t.memory_id = new.memory_id;
    end if;
    insert into public.memory_search_terms (user_id, lexeme, memory_id, tf)
    select new.user_id, u.lexeme, new.memory_id, least(cardinality(u.positions), 32767)
      from unnest(new.search_tsv) as u;
    return null;
end;
$$;

create trigger memory_search_docs_terms_sync
    after insert or update of content on public.memory_search_docs
    for each row execute function public.memory_search_terms_sync();


-- Every fact gets its search row when written; a changed text drops the stale embedding. Row-level and
-- `security invoker` (the default for triggers): it runs as the writer, under the same RLS.
create function public.memory_search_docs_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    if tg_op = 'UPDATE' and new.content is not distinct from old.content
       and new.session_id is not distinct from old.session_id
       and new.metadata ->> 'speaker' is not distinct from old.metadata ->> 'speaker' then
        return null;
    end if;
    insert into public.memory_search_docs as d (memory_id, user_id, session_id, content, speaker, prev_memory_id)
    values (new.id, new.user_id, new.session_id, new.content,
            nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary, new.metadata ->> 'speaker')), ''),
            case when new.session_id is not null then
                (select p.memory_id from public.memory_search_docs p
                  where p.user_id = new.user_id and p.session_id = new.session_id and p.memory_id <> new.id
                  order by p.seq desc limit 1) end)
    on conflict (user_id, memory_id) do update set
        session_id      = excluded.session_id,
        speaker         = excluded.speaker,
        content         = excluded.content,
        embedding       = case when d.content = excluded.content then d.embedding end,
        embedding_model = case when d.content = excluded.content then d.embedding_model end,
        embedded_at     = case when d.content = excluded.content then d.embedded_at end;
    return null;
end;
$$;

create trigger user_memory_search_docs_sync
    after insert or update of content, session_id, metadata on public.user_memory
    for each row when (new.kind = 'fact')
    execute function public.memory_search_docs_sync();

insert into public.memory_search_docs (memory_id, user_id, session_id, content, speaker, prev_memory_id)
select id, user_id, session_id, content,
       nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary, metadata ->> 'speaker')), ''),
       case when session_id is not null then
           lag(id) over (partition by user_id, session_id order by created_at, id) end
  from public.user_memory where kind = 'fact'
 order by created_at, id;


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


-- memory_upsert_embedded: memory_upsert_items (same arguments and result: the rows written, then the rows
-- superseded), then the embeddings the items carry ("embedding": [...]), in one round trip and one
-- transaction. What the plugin calls when it writes facts with an embedder configured. A vector lands only
-- on a fact whose text it was computed from (memory_set_embeddings): an item merged into a near-duplicate
-- worded otherwise leaves that fact's own vector alone.
-- Near-duplicates by embedding similarity (issue 4): a fact written with an embedding reinforces a current fact
-- of the same user and category whose vector of the same model is at least p_embedding_threshold similar
-- (cosine) and whose guard (numbers/codes, negation, named weekdays/months/colours/materials) is the same,
-- other than the fact it `replaces`, instead of adding a row. The rule and the threshold are described in
-- memory_plugin/quality/semantic.py (the same rule in Python, for the in-memory store) and the README
-- ("Keeping memory small, true and current").
--
-- Where it runs: in memory_upsert_embedded, the function the plugin calls when facts carry vectors, as a first
-- pass over the items inside the same round trip and transaction, before memory_upsert_items. Each fact item
-- with a vector and no stored row of its own hash gets the content_hash of its nearest match, which
-- memory_upsert_items then applies as a repeat of that row (confidence up by the reinforcement step, bounded
-- at 1; relevance_count + 1; last_reinforced_at; importance max; the stored wording, keys and vector kept).
-- Why not a third branch in memory_upsert_items' near-duplicate lookup: that function never sees vectors (it
-- is also called without any), and redefining its 250 lines for one branch would fork it; rewriting the hash
-- reuses its folding, write_id bookkeeping, `replaces` and slots unchanged. Order for one item: the same hash,
-- then the nearest vector (here), then trigrams (memory_upsert_items).
--
-- How the nearest fact is found: an exact scan of the user's current facts of the item's category and guard
-- (the GiST index user_memory_fact_match_idx leads with user_id, category, match_guard), each joined to its
-- vector by primary key. Not the HNSW index: it cannot filter by user, category or guard inside the graph
-- (memory_search's comment), and the candidates of one item are few (a guard with a number or a value splits
-- a user's facts finely). Items without match keys (`remember`, verbatim notes) are never merged.
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
            or not exists (select from public.memory_applied_writes w where w.write_id = p_write_id)) then
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
    -- As in 20261123120000_hybrid_search.sql: neighbours follow the order the items were given (memory_upsert_items
    -- inserts by content hash), re-made for the facts this write inserted (a repeat keeps its neighbours; an item
    -- merged into a near-duplicate finds no row of its own hash).
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


-- memory_search: the user's p_limit best valid, unexpired facts for a question, with the parts of each score.
--
-- 1. Candidates (each channel at most p_candidates facts): nearest vectors of p_model (exact for a user with
--    fewer than p_exact_scan_below vectors; above, HNSW with hnsw.iterative_scan so the user filter does not
--    starve the result), best BM25 matches (memory_search_terms; at most p_text_scan_limit postings per word
--    are read, bounding the cost of very common words), and facts stated inside a date the question names.
-- 2. Relevance of each candidate, a weighted sum (weights calibrated on LoCoMo's development split, see
--    memory_plugin/retrieval/weights.py; reciprocal-rank fusion measured 0.05 lower recall@10):
--      text      BM25 / the best BM25 among the candidates (0–1)
--      vector    cosine similarity to the question
--      neighbour best cosine similarity of the fact just before or after it in its session (a question
--                often spans a question/answer pair of turns; Mastra's messageRange idea, as a score)
--      trigram   word_similarity(question, text) (typos, partial names)
--      speaker   1 when the fact's metadata.speaker is the one person the question names
--      date      1 inside a date window of the question, falling linearly to 0 p_date_slack_days away
--      time      1 when the question asks "when" (p_asks_when) and the text holds a time expression
-- 3. Score = relevance + w_importance * importance/5 + w_confidence * confidence + w_recency * recency
--    (seed 000's terms; recency falls linearly to 0 over p_recency_window_days since last reinforcement).
-- Cost choices (issue 5 item 5; measured with bench/retrieval_latency.py, a 100k-fact user among 200k rows of
-- other users, README "Benchmarks"):
--  - the HNSW walk: ef_search was k (50), so with other users' rows in the user's partition one pass rarely
--    yielded k of theirs and the iterative scan walked a second time (6.3 / 15.3 ms p50/p95). Now the vector
--    channel takes greatest(p_limit, k/2) nearest vectors with ef_search twice that (2.9 / 3.4 ms): HNSW
--    order is approximate anyway, and the fused score re-ranks them. Users below p_exact_scan_below vectors
--    (LoCoMo-size) are scanned exactly, as before, with all k.
--  - BM25 returns the ranks of the candidates only (two arrays), instead of a jsonb map of every fact that
--    matched a word (up to p_text_scan_limit per word, ~2,000 keys built and then looked up).
--  - the fact's jsonb (`to_jsonb(user_memory)`) is built for the p_limit rows returned, not for every
--    candidate; the ranking carries only the columns it scores.

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
as $$
declare
    v_k integer := greatest(p_candidates, p_limit);
    v_q extensions.halfvec(384) := p_embedding::extensions.halfvec(384);
    v_vectors integer;
    v_vk integer;
    v_vec_ids uuid[] := '{}';
    v_txt_ids uuid[] := '{}';
    v_bm25_ids uuid[] := '{}';
    v_bm25_ranks float8[] := '{}';
    -- The question's lexemes, as the facts' were made (memory_search_terms).
    v_terms text[] := tsvector_to_array(public.memory_tsvector(p_query));
    v_qtext text := lower(extensions.unaccent('extensions.unaccent'::regdictionary, p_query));
begin
    if p_embedding is not null and p_model is not null then
        select count(*) into v_vectors
          from (select 1 from public.memory_search_docs d
                 where d.user_id = p_user_id and d.embedding_model = p_model
                 limit p_exact_scan_below) as s;
        if v_vectors < p_exact_scan_below then
            -- Exact: the `+ 0` keeps the planner off the HNSW index, which would visit every user's vectors
            -- to find this small user's few.
            select coalesce(array_agg(x.memory_id), '{}') into v_vec_ids
              from (select d.memory_id from public.memory_search_docs d
                     where d.user_id = p_user_id and d.embedding_model = p_model
                     order by (d.embedding operator(extensions.<=>) v_q) + 0
                     limit v_k) as x;
        else
            -- Iterative scan: HNSW keeps walking until enough vectors pass the user/model filter (relaxed order:
            -- the final order is the fused score's anyway). Half the candidates (at least p_limit), with
            -- ef_search twice that: the user's rows are most but not all of their partition, and with
            -- ef_search = k one pass rarely yielded k of theirs, so the scan walked the graph twice.
            v_vk := greatest(p_limit, v_k / 2);
            perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
            perform set_config('hnsw.ef_search', least(greatest(2 * v_vk, 40), 1000)::text, true);
            select coalesce(array_agg(x.memory_id), '{}') into v_vec_ids
              from (select d.memory_id from public.memory_search_docs d
                     where d.user_id = p_user_id and d.embedding_model = p_model
                     order by d.embedding operator(extensions.<=>) v_q
                     limit v_vk) as x;
        end if;
    end if;

    -- BM25 over the question's words (k1 = 1.2, no length normalisation: facts are short), from the postings
    -- of each word, at most p_text_scan_limit per word. idf = ln(1 + p_text_scan_limit / df): the cap stands
    -- in for the collection size, which keeps it monotone in df without counting the user's facts. Kept as a
    -- jsonb map (fact id -> BM25) for the candidates' lookups: a join with a CTE of unknown size was planned
    -- as a nested loop over it (2 ms at 350 matches).
    with hits as materialized (
        select t.lexeme, p.memory_id, p.tf
          from unnest(v_terms) as t(lexeme),
               lateral (select s.memory_id, s.tf from public.memory_search_terms s
                         where s.user_id = p_user_id and s.lexeme = t.lexeme
                         limit p_text_scan_limit) as p
    ),
    bm25 as materialized (
        select h.memory_id, sum(ln(1 + p_text_scan_limit::float8 / f.df) * h.tf * 2.2 / (h.tf + 1.2)) as rank
          from hits h
          join (select lexeme, count(*) as df from hits group by lexeme) as f on f.lexeme = h.lexeme
         group by h.memory_id
    )
    -- The text channel's top v_k, and the rank of every vector candidate (the rest is never looked up).
    select coalesce(array_agg(b.memory_id), '{}'), coalesce(array_agg(b.rank), '{}'),
           coalesce((select array_agg(t.memory_id) from (select x.memory_id from bm25 x order by x.rank desc
                                                          limit v_k) as t), '{}')
      into v_bm25_ids, v_bm25_ranks, v_txt_ids
      from bm25 b
     where b.memory_id = any(v_vec_ids)
        or b.rank >= coalesce((select x.rank from bm25 x order by x.rank desc offset v_k - 1 limit 1), 0);

    return query
    with     dated as (
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
        select unnest(v_vec_ids) as memory_id
        union select unnest(v_txt_ids)
        union select memory_id from dated
    ),
    ranks as (
        select r.memory_id, r.rank from unnest(v_bm25_ids, v_bm25_ranks) as r(memory_id, rank)
    ),
    parts as (
        -- Only what the ranking needs of the fact; its jsonb is built for the returned rows alone.
        select m.id, m.importance, m.confidence, m.last_reinforced_at,
               coalesce(r.rank, 0) as rank,
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
          from cand c
          left join ranks r on r.memory_id = c.memory_id
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

revoke all on function public.memory_tsvector(text) from public, anon;
revoke all on function public.memory_has_time_expression(text) from public, anon;
revoke all on function public.memory_search_docs_sync() from public, anon;
revoke all on function public.memory_search_terms_sync() from public, anon;
revoke all on function public.memory_set_embeddings(uuid, text, jsonb) from public, anon;
revoke all on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) from public, anon;
revoke all on function public.memory_search(uuid, text, extensions.vector, text, integer, integer, real, real, real, real,
    real, real, real, real, real, real, real, timestamptz[], timestamptz[], integer[], boolean, real, integer, integer,
    timestamptz) from public, anon;
revoke all on function public.memory_embedding_backlog(uuid, text, integer) from public, anon;
grant execute on function public.memory_tsvector(text) to authenticated, service_role;
grant execute on function public.memory_has_time_expression(text) to authenticated, service_role;
grant execute on function public.memory_search_docs_sync() to authenticated, service_role;
grant execute on function public.memory_search_terms_sync() to authenticated, service_role;
grant execute on function public.memory_set_embeddings(uuid, text, jsonb) to authenticated, service_role;
grant execute on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) to authenticated, service_role;
grant execute on function public.memory_search(uuid, text, extensions.vector, text, integer, integer, real, real, real,
    real, real, real, real, real, real, real, real, timestamptz[], timestamptz[], integer[], boolean, real, integer,
    integer, timestamptz) to authenticated, service_role;
grant execute on function public.memory_embedding_backlog(uuid, text, integer) to authenticated, service_role;
