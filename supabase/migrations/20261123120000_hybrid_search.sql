-- Query-aware retrieval: embeddings in pgvector beside their text, full-text and trigram relevance, and one
-- function, memory_search, that fuses them and the fact's own weight (importance, confidence, recency) in one
-- round trip. README "Search and remember" explains the ranking; bench/locomo.py measures it.
--
-- Where the vectors live. A separate table, memory_search_docs, one row per fact, rather than columns on
-- user_memory:
--  - memory_context and memory_upsert_items return `setof user_memory` (`select *`): a 384-float vector and a
--    tsvector on every returned row would cost every context read ~1.6 kB per fact for nothing;
--  - the text that was embedded sits beside its vector (`content`), so the dashboard shows what each embedding
--    means (seed 003: anything with an embedding has its plain text beside it);
--  - the row also carries what search needs per fact (tsvector, session and insertion order for neighbours),
--    so candidate generation reads one narrow table and joins user_memory only for the few candidates.
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
-- btree_gin: a GIN index on (user_id, tsvector), so a text search reads only the user's postings instead of
-- every user's matches followed by a filter.
create extension if not exists btree_gin with schema extensions;
grant usage on schema extensions to anon, authenticated, service_role;


-- A fifth fact category for what is remembered as stated (a conversation turn, an event, a note) by
-- `MemoryManager.remember`, which stores without a model call and so cannot classify.
alter table public.user_memory drop constraint user_memory_category_check;
alter table public.user_memory add constraint user_memory_category_check check (
    (kind = 'fact' and category in ('preference', 'requirement', 'constraint', 'feedback', 'note'))
    or (kind = 'preference' and category in
        ('preferred_materials', 'typical_quantities', 'communication_style', 'industry', 'location'))
    or (kind in ('project', 'pattern') and category = kind)
);

-- Dates in a question ("on 13 October 2023") are matched against occurred_at.
create index user_memory_fact_occurred_idx on public.user_memory (user_id, occurred_at) where kind = 'fact';


-- memory_tsvector / memory_tsquery: the text-search forms of a fact and of a question. `unaccent` is only
-- `stable` (its dictionary could change), so it is wrapped with the dictionary named explicitly and declared
-- immutable, as Supabase users do, to be usable in a generated column. English and Spanish stems side by
-- side: on LoCoMo (English) English stemming beats `simple` by +0.09 BM25 recall@10 (bench/locomo_lab.py);
-- Spanish stems let "prefiere" match "preferimos" for the plugin's Spanish users.
create function public.memory_tsvector(p_text text) returns tsvector
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select to_tsvector('pg_catalog.english'::regconfig, extensions.unaccent('extensions.unaccent'::regdictionary, p_text))
        || to_tsvector('pg_catalog.spanish'::regconfig, extensions.unaccent('extensions.unaccent'::regdictionary, p_text));
$$;

-- Any word of the question may match (OR): plainto_tsquery would AND them, and a question rarely shares all
-- its words with the fact that answers it. Lexemes are already normalised, so the text cast does not re-stem.
create function public.memory_tsquery(p_text text) returns tsquery
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select case when numnode(q) = 0 then q
                else regexp_replace(q::text, '&|<->|<[0-9]+>', '|', 'g')::tsquery end
      from (select plainto_tsquery('pg_catalog.english'::regconfig,
                                   extensions.unaccent('extensions.unaccent'::regdictionary, p_text))
                || plainto_tsquery('pg_catalog.spanish'::regconfig,
                                   extensions.unaccent('extensions.unaccent'::regdictionary, p_text)) as q) as s;
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

create table public.memory_search_docs (
    memory_id       uuid primary key references public.user_memory (id) on delete cascade,
    user_id         uuid        not null,
    -- Neighbours (the turns just before and after a hit) are the previous and next fact of the same session
    -- in insertion order.
    session_id      text,
    seq             bigint      generated always as identity,
    -- The fact's text, as embedded and as searched (kept equal to user_memory.content by a trigger).
    content         text        not null,
    search_tsv      tsvector    generated always as (public.memory_tsvector(content)) stored,
    has_time        boolean     generated always as (public.memory_has_time_expression(content)) stored,
    -- user_memory.metadata->>'speaker', lower-cased and unaccented: a question naming them favours their facts.
    speaker         text,
    embedding       extensions.vector(384),
    embedding_model text,
    embedded_at     timestamptz,
    constraint memory_search_docs_embedding_model_check check ((embedding is null) = (embedding_model is null))
);

-- Keep vectors inside the row (pgvector's default storage moves them out of line once a row passes ~2 kB,
-- which a long text with its tsvector does): every distance computed then reads the page it is on.
alter table public.memory_search_docs alter column embedding set storage main;

comment on table public.memory_search_docs is
    'Search index of each fact (memory_plugin): its text, tsvector and embedding (with the model that made it). Maintained by triggers on user_memory; embeddings written at fact creation or by `memory-plugin reembed`. RLS: a user sees only their own rows.';
comment on column public.memory_search_docs.content is 'The plain text the embedding was computed from.';
comment on column public.memory_search_docs.embedding_model is 'The embedding model, e.g. sentence-transformers:all-MiniLM-L6-v2; searches compare only vectors of one model.';

-- HNSW over every user's vectors; memory_search filters by user with `hnsw.iterative_scan` for users with
-- many facts and scans a small user's vectors exactly (see there). m/ef_construction: pgvector's defaults.
create index memory_search_docs_embedding_idx on public.memory_search_docs
    using hnsw (embedding extensions.vector_cosine_ops);
create index memory_search_docs_user_tsv_idx on public.memory_search_docs using gin (user_id, search_tsv);
create index memory_search_docs_user_model_idx on public.memory_search_docs (user_id, embedding_model);
create index memory_search_docs_neighbours_idx on public.memory_search_docs (user_id, session_id, seq);

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
    insert into public.memory_search_docs as d (memory_id, user_id, session_id, content, speaker)
    values (new.id, new.user_id, new.session_id, new.content,
            nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary, new.metadata ->> 'speaker')), ''))
    on conflict (memory_id) do update set
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

insert into public.memory_search_docs (memory_id, user_id, session_id, content, speaker)
select id, user_id, session_id, content,
       nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary, metadata ->> 'speaker')), '')
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
           set embedding = i.embedding::extensions.vector, embedding_model = p_model, embedded_at = now()
          from jsonb_to_recordset(p_items) as i(content_hash text, content text, embedding text),
               public.user_memory m
         where m.user_id = p_user_id and m.content_hash = i.content_hash and m.kind = 'fact'
           and d.memory_id = m.id and d.user_id = p_user_id and d.content = i.content
        returning 1
    )
    select count(*)::integer from updated;
$$;


-- memory_upsert_embedded: memory_upsert_items, then the embeddings the items carry ("embedding": [...]), in one
-- round trip and one transaction. What the plugin calls when it writes facts with an embedder configured.
create function public.memory_upsert_embedded(
    p_user_id uuid,
    p_items jsonb,
    p_reinforcement_step real default 0.1,
    p_write_id uuid default null,
    p_model text default null
)
    returns setof public.user_memory
    language plpgsql
    security invoker
    set search_path = ''
as $$
declare
    v_ids uuid[];
begin
    select array_agg(w.id) into v_ids
      from public.memory_upsert_items(p_user_id, p_items, p_reinforcement_step, p_write_id) as w;
    if p_model is not null then
        perform public.memory_set_embeddings(
            p_user_id, p_model,
            coalesce((select jsonb_agg(i) from jsonb_array_elements(p_items) as i where i ? 'embedding'
                                                                                    and i ->> 'kind' = 'fact'),
                     '[]'::jsonb));
    end if;
    return query
        select m.* from unnest(v_ids) with ordinality as w(id, n)
          join public.user_memory m on m.id = w.id
         order by w.n;
end;
$$;


-- memory_search: the user's p_limit best valid, unexpired facts for a question, with the parts of each score.
--
-- 1. Candidates (each channel at most p_candidates facts): nearest vectors of p_model (exact for a user with
--    fewer than p_exact_scan_below vectors; above, HNSW with hnsw.iterative_scan so the user filter does not
--    starve the result), full-text matches (GIN on (user_id, tsvector); at most p_text_scan_limit matches
--    are ranked, bounding the cost of a question made of very common words), and facts stated inside a date
--    the question names.
-- 2. Relevance of each candidate, a weighted sum (weights calibrated on LoCoMo's development split, see
--    memory_plugin/retrieval/weights.py; reciprocal-rank fusion measured 0.09 lower recall@10):
--      text      ts_rank / the best ts_rank among the candidates (0–1)
--      vector    cosine similarity to the question
--      neighbour best cosine similarity of the fact just before or after it in its session (a question
--                often spans a question/answer pair of turns; Mastra's messageRange idea, as a score)
--      trigram   word_similarity(question, text) (typos, partial names)
--      speaker   1 when the fact's metadata.speaker is the one person the question names
--      date      1 inside a date window of the question, falling linearly to 0 p_date_slack_days away
--      time      1 when the question asks "when" (p_asks_when) and the text holds a time expression
-- 3. Score = relevance + w_importance * importance/5 + w_confidence * confidence + w_recency * recency
--    (seed 000's terms; recency falls linearly to 0 over p_recency_window_days since last reinforcement).
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
    p_text_scan_limit integer default 2000,
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
    v_vectors integer;
    v_vec_ids uuid[] := '{}';
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
                     order by (d.embedding operator(extensions.<=>) p_embedding) + 0
                     limit v_k) as x;
        else
            -- Iterative scan: HNSW keeps walking until v_k vectors pass the user/model filter (relaxed order:
            -- the final order is the fused score's anyway).
            perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
            perform set_config('hnsw.ef_search', greatest(v_k, 40)::text, true);
            select coalesce(array_agg(x.memory_id), '{}') into v_vec_ids
              from (select d.memory_id from public.memory_search_docs d
                     where d.user_id = p_user_id and d.embedding_model = p_model
                     order by d.embedding operator(extensions.<=>) p_embedding
                     limit v_k) as x;
        end if;
    end if;

    return query
    with q as materialized (
        select public.memory_tsquery(p_query) as tsq,
               lower(extensions.unaccent('extensions.unaccent'::regdictionary, p_query)) as qtext
    ),
    txt as (
        select t.memory_id
          from (select d.memory_id, d.search_tsv from public.memory_search_docs d, q
                 where d.user_id = p_user_id and d.search_tsv operator(pg_catalog.@@) q.tsq
                 limit p_text_scan_limit) as t, q
         order by ts_rank(t.search_tsv, q.tsq) desc
         limit v_k
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
        select unnest(v_vec_ids) as memory_id
        union select memory_id from txt
        union select memory_id from dated
    ),
    parts as (
        select m,
               ts_rank(d.search_tsv, q.tsq)::float8 as rank,
               case when d.embedding_model = p_model and p_embedding is not null
                    then 1 - (d.embedding operator(extensions.<=>) p_embedding) else 0 end as vector_score,
               coalesce(greatest(
                   (select 1 - (n.embedding operator(extensions.<=>) p_embedding) from public.memory_search_docs n
                     where n.user_id = p_user_id and n.session_id = d.session_id and n.seq < d.seq
                       and n.embedding_model = p_model
                     order by n.seq desc limit 1),
                   (select 1 - (n.embedding operator(extensions.<=>) p_embedding) from public.memory_search_docs n
                     where n.user_id = p_user_id and n.session_id = d.session_id and n.seq > d.seq
                       and n.embedding_model = p_model
                     order by n.seq limit 1)), 0) as neighbour_score,
               case when p_weight_trigram > 0
                    then extensions.word_similarity(q.qtext, lower(d.content))::float8 else 0 end as trigram_score,
               d.speaker,
               q.qtext,
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
          join public.memory_search_docs d on d.memory_id = c.memory_id and d.user_id = p_user_id
          join public.user_memory m on m.id = c.memory_id and m.user_id = p_user_id
          cross join q
         where m.kind = 'fact' and m.invalid_at is null and m.archived_at is null
           and (m.expires_at is null or m.expires_at > p_now)
    ),
    named as materialized (
        -- The speakers the question names; the boost applies only when it names exactly one (a question
        -- naming both sides of a conversation says nothing about whose turn answers it).
        select array_agg(s.speaker) as speakers
          from (select distinct p.speaker, p.qtext from parts p where p.speaker is not null) as s
         where s.qtext ~ ('\m' || regexp_replace(s.speaker, '([^[:alnum:][:space:]])', '\\\1', 'g') || '\M')
    ),
    scored as (
        select p.m,
               coalesce(p.rank / nullif(max(p.rank) over (), 0), 0) as text_score,
               p.vector_score, p.neighbour_score, p.trigram_score,
               case when cardinality(n.speakers) = 1 and p.speaker = n.speakers[1] then 1 else 0 end::float8
                   as speaker_score,
               greatest(p.date_window, p.date_month)::float8 as date_score,
               p.time_score::float8 as time_score,
               (p.m).importance / 5.0::float8 as importance_score,
               (p.m).confidence::float8 as confidence_score,
               least(1, greatest(0, 1 - date_part('epoch', p_now - (p.m).last_reinforced_at)
                                      / greatest(p_recency_window_days::float8 * 86400, 1e-9))) as recency_score
          from parts p cross join named n
    )
    select to_jsonb(s.m),
           p_weight_text * s.text_score + p_weight_vector * s.vector_score
         + p_weight_neighbour * s.neighbour_score + p_weight_trigram * s.trigram_score
         + p_weight_speaker * s.speaker_score + p_weight_date * s.date_score + p_weight_time * s.time_score
         + p_weight_importance * s.importance_score + p_weight_confidence * s.confidence_score
         + p_weight_recency * s.recency_score,
           s.text_score, s.vector_score, s.neighbour_score, s.trigram_score, s.speaker_score, s.date_score,
           s.time_score, s.importance_score, s.confidence_score, s.recency_score
      from scored s
     order by 2 desc, (s.m).last_reinforced_at desc, (s.m).id
     limit p_limit;
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
revoke all on function public.memory_tsquery(text) from public, anon;
revoke all on function public.memory_has_time_expression(text) from public, anon;
revoke all on function public.memory_search_docs_sync() from public, anon;
revoke all on function public.memory_set_embeddings(uuid, text, jsonb) from public, anon;
revoke all on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, text) from public, anon;
revoke all on function public.memory_search(uuid, text, extensions.vector, text, integer, integer, real, real, real, real,
    real, real, real, real, real, real, real, timestamptz[], timestamptz[], integer[], boolean, real, integer, integer,
    timestamptz) from public, anon;
revoke all on function public.memory_embedding_backlog(uuid, text, integer) from public, anon;
grant execute on function public.memory_tsvector(text) to authenticated, service_role;
grant execute on function public.memory_tsquery(text) to authenticated, service_role;
grant execute on function public.memory_has_time_expression(text) to authenticated, service_role;
grant execute on function public.memory_search_docs_sync() to authenticated, service_role;
grant execute on function public.memory_set_embeddings(uuid, text, jsonb) to authenticated, service_role;
grant execute on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, text) to authenticated, service_role;
grant execute on function public.memory_search(uuid, text, extensions.vector, text, integer, integer, real, real, real,
    real, real, real, real, real, real, real, real, timestamptz[], timestamptz[], integer[], boolean, real, integer,
    integer, timestamptz) to authenticated, service_role;
grant execute on function public.memory_embedding_backlog(uuid, text, integer) to authenticated, service_role;
