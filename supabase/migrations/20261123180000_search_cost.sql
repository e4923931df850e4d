-- memory_search, cheaper at every size (issue 5 item 5: latency that stays flat), same signature, same ranking
-- (the top 10 of 300 synthetic questions identical at 1k, 10k and 100k facts), one change in what a candidate
-- scores: a fact found only by a date the question names now gets its BM25 like any other candidate (it got 0
-- when its text matched below the text channel's cut-off).
--
-- Measured with bench/retrieval_latency.py's data (a 100k-fact user among 200k rows of other users, shared_buffers
-- 1 GB), raw SQL as the user, 100 questions interleaved with the previous version in one run, p50 / p95 ms:
--   1k facts 2.77 / 3.24 -> 2.71 / 3.10;  10k 4.90 / 5.68 -> 4.55 / 5.38;  100k 6.98 / 12.42 -> 6.48 / 8.16
-- (before the ef_search change below, which saved another 0.3-0.4 ms at 100k in a separate A/B run).
-- What changed:
--  - planning: every statement but the two vector ones now runs a generic plan (`plan_cache_mode` is set for
--    the function only, and restored on return); custom plans re-planned a nine-way join over sixteen
--    partitions on every call, 0.4-1.0 ms. The vector statements are EXECUTEd, so planned with the question's
--    vector (a generic plan skips the HNSW index: 104 ms at 100k facts).
--  - the candidates' BM25 was a nested-loop join against an unnested array (75 x 82 comparisons per search);
--    now the statement that computes BM25 also builds the candidate list with each one's BM25.
--  - BM25 reads each word's postings once and aggregates once (two aggregates and a join before).
--  - HNSW ef_search 1.5 x the vector channel's share (2 x before).

create or replace function public.memory_search(
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
as $$
declare
    v_k integer := greatest(p_candidates, p_limit);
    v_q extensions.halfvec(384) := p_embedding::extensions.halfvec(384);
    v_vectors integer;
    v_vk integer;
    v_vec_ids uuid[] := '{}';
    v_ids uuid[] := '{}';
    v_ranks float8[] := '{}';
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
            -- to find this small user's few. Both vector statements are planned per call (EXECUTE), with the
            -- user, the question's vector and the limit known: a generic plan of the HNSW statement skipped the
            -- index (104 ms at 100k facts, measured before this migration), and the best plan of this one
            -- depends on how many of the partition's rows are the user's.
            execute 'select coalesce(array_agg(x.memory_id), ''{}'') from (select d.memory_id'
                    ' from public.memory_search_docs d where d.user_id = $1 and d.embedding_model = $2'
                    ' order by (d.embedding operator(extensions.<=>) $3) + 0 limit $4) as x'
               into v_vec_ids using p_user_id, p_model, v_q, v_k;
        else
            -- Iterative scan: HNSW keeps walking until enough vectors pass the user/model filter (relaxed order:
            -- the final order is the fused score's anyway). Half the candidates (at least p_limit), with
            -- ef_search 1.5 times that (at least 40, pgvector's default): the user's rows are most but not all
            -- of their partition, and with ef_search = k one pass rarely yielded k of theirs, so the scan walked
            -- the graph twice; 2k instead of 1.5k cost 0.3 ms more at 100k facts for the same top 10.
            v_vk := greatest(p_limit, v_k / 2);
            perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
            perform set_config('hnsw.ef_search', least(greatest(v_vk + v_vk / 2, 40), 1000)::text, true);
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
    -- gives each its BM25, so the ranking below joins nothing to find it.
    with bm25 as materialized (
        select p.memory_id, sum(ln(1 + p_text_scan_limit::float8 / a.df) * p.tf * 2.2 / (p.tf + 1.2)) as rank
          from unnest(v_terms) as t(lexeme),
               lateral (select array_agg(s.memory_id) as ids, array_agg(s.tf) as tfs, count(*) as df
                          from (select s.memory_id, s.tf from public.memory_search_terms s
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
