-- memory_search takes a third of each channel's candidates (vector, text, dated: 50, at least p_limit) for a
-- user with 5,000 facts or more, and all of them (p_candidates, 150) below; the vector channel is scanned
-- exactly below 5,000 (was 2,000). Before, every channel took 150, except HNSW, which took half (at least the
-- 100 reranked, ef_search 150). In a large history each candidate costs the ranking more (its rows are spread
-- over more pages than the cache holds) and the walk for 50 (ef_search 75) is ~40 % cheaper: server time per
-- search at 100k facts 13.6 -> 7.5 ms p50 (bench/retrieval_latency.py's users, interleaved). Recall: all five
-- LoCoMo dev conversations in one 2,760-fact memory, recall@10 over categories 1-4 0.793 with every channel at
-- 150 (now: below 5,000 facts), 0.784 with the vector channel at 100 (before, through HNSW), 0.778 with every
-- channel at 50. Same signature, a new default for p_exact_scan_below: `create or replace` keeps the grants and
-- the comment. See supabase/schemas/22_memory_search.sql.
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
    p_exact_scan_below integer default 5000,
    p_text_scan_limit integer default 500,
    p_now timestamptz default now(),
    p_rerank_weights double precision[] default null,
    p_entities text[] default '{}',
    p_rerank_pool integer default 0
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
        recency_score double precision,
        -- The reranker's inputs of the same names (0 without p_rerank_weights), and the hybrid score it started
        -- from (null without).
        session_score double precision,
        adjacent_score double precision,
        entity_score double precision,
        hybrid_score double precision,
        -- The fact just before it in its session (its neighbour): the reranker (memory_plugin/retrieval/
        -- rerank.py) looks for candidates that are each other's neighbours.
        prev_memory_id uuid
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
    -- Reranked: the hybrid order's best p_rerank_pool (at least p_limit) are reranked and p_limit returned.
    v_pool integer := case when p_rerank_weights is not null then greatest(p_limit, p_rerank_pool) else p_limit end;
    v_k integer := greatest(p_candidates, v_pool);
    v_q extensions.halfvec(384) := p_embedding::extensions.halfvec(384);
    v_docs integer;
    v_rows real;
    v_share float8 := 1;
    v_ck integer;
    v_ef integer;
    v_vec_ids uuid[] := '{}';
    v_ids uuid[] := '{}';
    v_ranks float8[] := '{}';
    -- The question's lexemes, as the facts' were made (memory_private.memory_search_terms).
    v_terms text[] := tsvector_to_array(memory_private.memory_tsvector(p_query));
    v_qtext text := lower(extensions.unaccent('extensions.unaccent'::regdictionary, p_query));
    v_reranks boolean := p_rerank_weights is not null;
    -- Each of the question's names as a whole-word pattern on the folded text (none without the reranker).
    v_names text[] := case when p_rerank_weights is null then '{}'::text[] else array(
        select '\m' || regexp_replace(e.name, '([^[:alnum:][:space:]])', '\\\1', 'g') || '\M'
          from unnest(p_entities) as e(name)) end;
begin
    if v_reranks and cardinality(p_rerank_weights) <> 14 then
        raise exception 'p_rerank_weights holds % weights; the reranker has 14 inputs', cardinality(p_rerank_weights)
            using errcode = '22023';
    end if;
    -- The user's facts, and the rows of their partition from the planner's statistics (0 before its first
    -- analyze: then the user's own count stands in, share 1).
    select c.docs, greatest(p.reltuples, 0) into v_docs, v_rows
      from memory_private.memory_search_counts c left join pg_catalog.pg_class p on p.oid = c.search_partition
     where c.user_id = p_user_id;
    v_docs := coalesce(v_docs, 0);
    -- Each channel's candidates: v_k below p_exact_scan_below facts, a third of it (at least p_limit) above (see
    -- the header).
    v_ck := case when v_docs < p_exact_scan_below then v_k else greatest(p_limit, v_k / 3) end;
    if p_embedding is not null and p_model is not null then
        if v_docs > 0 then
            v_share := v_docs::float8 / greatest(coalesce(v_rows, 0)::float8, v_docs);
        end if;
        -- ef_search 1.5 times the rows wanted (at least 40, pgvector's default): see the header.
        v_ef := least(greatest(v_ck + v_ck / 2, 40), 1000);
        -- Exact scan or HNSW, by their cost. The exact scan reads the user's vectors: cost ~ v_docs. The HNSW
        -- walk visits the whole partition's graph and keeps the user's rows: one ef_search pass when most rows
        -- are the user's, about v_ck / share tuples when few are (a 10k-fact user sharing a partition with a
        -- 100k-fact one, share 8 %: 31 ms through HNSW, 4.4 ms exact). p_exact_scan_below is half the
        -- break-even of a user who fills their partition (see the header); it grows as the user's share shrinks.
        if v_docs < p_exact_scan_below * greatest(1, v_ck / (greatest(v_share, 1e-6) * v_ef)) then
            -- Exact: the `+ 0` keeps the planner off the HNSW index; a generic plan, planned once per session
            -- (see the header).
            select coalesce(array_agg(x.memory_id), '{}') into v_vec_ids from (select d.memory_id
              from public.memory_search_docs d where d.user_id = p_user_id and d.embedding_model = p_model
             order by (d.embedding operator(extensions.<=>) v_q) + 0 limit v_ck) as x;
        else
            -- Iterative scan: HNSW keeps walking until enough vectors pass the user/model filter (relaxed
            -- order: the final order is the fused score's anyway).
            perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
            perform set_config('hnsw.ef_search', v_ef::text, true);
            execute 'select coalesce(array_agg(x.memory_id), ''{}'') from (select d.memory_id'
                    ' from public.memory_search_docs d where d.user_id = $1 and d.embedding_model = $2'
                    ' order by d.embedding operator(extensions.<=>) $3 limit $4) as x'
               into v_vec_ids using p_user_id, p_model, v_q, v_ck;
        end if;
    end if;

    -- BM25 over the question's words (k1 = 1.2, no length normalisation: facts are short), from the postings
    -- of each word, at most p_text_scan_limit per word. idf = ln(1 + p_text_scan_limit / df): the cap stands
    -- in for the collection size, which keeps it monotone in df without counting the user's facts. Each
    -- word's postings and document frequency come from one read, then one aggregate per fact; the same
    -- statement picks the candidates (the text channel's top v_ck, the vector channel's, the dated ones) and
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
                         limit v_ck) as m
    ),
    -- The text channel's best v_ck, without the facts tied with the last of them when those would not all fit:
    -- which of equally good facts get in must not depend on their random ids. The tie is common: a name the
    -- question holds is in every turn its speaker said ("Caroline: …"), and those turns, matched by the name
    -- alone, all score the same (LoCoMo's development split: the 150th place is tied for every question, with
    -- 338 turns on average). Left out, they change nothing measurable (the evidence share of the candidates
    -- 0.918 both, the reranker's cross-validated recall@10 0.801 → 0.802) and fewer facts are scored; taken at
    -- random, recall@10 moved by up to 0.006 between runs.
    text_cut as (
        select c.rank, (select count(*) from bm25 z where z.rank >= c.rank) as tied_or_better
          from (select y.rank from bm25 y order by y.rank desc offset v_ck - 1 limit 1) as c
    ),
    cand as (
        select b.memory_id from bm25 b
         where not exists (select from text_cut)
            or b.rank > (select t.rank from text_cut t)
            or (b.rank = (select t.rank from text_cut t) and (select t.tied_or_better from text_cut t) <= v_ck)
        union select unnest(v_vec_ids)
        union select memory_id from dated
    )
    select coalesce(array_agg(c.memory_id), '{}'), coalesce(array_agg(coalesce(b.rank, 0)), '{}')
      into v_ids, v_ranks
      from cand c left join bm25 b on b.memory_id = c.memory_id;

    return query
    with parts as (
        -- Only what the ranking needs of the fact; its jsonb is built for the returned rows alone.
        select m.id, m.session_id, m.importance, m.confidence, m.last_reinforced_at, m.occurred_at, d.seq,
               d.prev_memory_id, c.rank,
               case when d.embedding_model = p_model and p_embedding is not null
                    then 1 - (d.embedding operator(extensions.<=>) v_q) else 0 end as vector_score,
               coalesce(greatest(
                   case when np.embedding_model = p_model then 1 - (np.embedding operator(extensions.<=>) v_q) end,
                   case when nn.embedding_model = p_model then 1 - (nn.embedding operator(extensions.<=>) v_q) end),
                   0) as neighbour_score,
               case when p_weight_trigram > 0
                    then extensions.word_similarity(v_qtext, lower(d.content))::float8 else 0 end as trigram_score,
               d.speaker, d.content,
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
         -- Archived facts too: maintenance archives a fact whose confidence decayed below the prompt's floor
         -- (an expired one stays out by expires_at), and a question about that old event still finds it.
         where m.kind = 'fact' and m.invalid_at is null
           and (m.expires_at is null or m.expires_at > p_now)
    ),
    named as materialized (
        -- The speakers the question names; the boost applies only when it names exactly one (a question
        -- naming both sides of a conversation says nothing about whose turn answers it). `offset 0` keeps the
        -- pattern above the DISTINCT: built and matched once per speaker, not once per candidate (pushed below
        -- it, it cost 3.4 % of a LoCoMo search's server time).
        select array_agg(s.speaker) as speakers
          from (select distinct p.speaker from parts p where p.speaker is not null offset 0) as s
         where v_qtext ~ ('\m' || regexp_replace(s.speaker, '([^[:alnum:][:space:]])', '\\\1', 'g') || '\M')
    ),
    scored as (
        select p.id, p.session_id, p.last_reinforced_at, p.occurred_at, p.seq, p.prev_memory_id, p.content,
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
    ),
    -- The hybrid order's best v_pool, numbered from 0 (`place`). Ties: the newer fact first, then the
    -- later-stored one (the user's own counter, seq): never the random id, so that the same facts stored in
    -- the same order rank the same on every run.
    hybrid as materialized (
        select h.*, case when h.best > 0 then h.score / h.best else 0 end as relative,
               -- 1 / log2(2 + place): the rank's weight, as ln / ln 2 (rerank._RANK_WEIGHT, the same formula).
               1 / (ln(h.place + 2::float8) / ln(2::float8)) as rank_weight,
               -- The reranker's `entity`: the question's names in the text, computed here, once per row of the
               -- pool. In `features` the planner inlined the folded text into the count and the sort key: folded
               -- once per name, then again for the rows returned (1.4 % of a LoCoMo search's server time).
               case when cardinality(v_names) = 0 then 0::float8
                    else (select count(*)
                            from (select lower(extensions.unaccent('extensions.unaccent'::regdictionary, h.content))
                                             as folded offset 0) as z,
                                 unnest(v_names) as n(pattern)
                           where z.folded ~ n.pattern)::float8 / cardinality(v_names) end as entity_feature
          from (select s.*,
                       (row_number() over w - 1)::integer as place,
                       -- The best score is the first row's (no score is null): one window pass, not two (1.6 %).
                       first_value(s.score) over w as best
                  from (select s.id, s.session_id, s.last_reinforced_at, s.occurred_at, s.seq, s.prev_memory_id,
                               s.content,
                               p_weight_text * s.text_score + p_weight_vector * s.vector_score
                             + p_weight_neighbour * s.neighbour_score + p_weight_trigram * s.trigram_score
                             + p_weight_speaker * s.speaker_score + p_weight_date * s.date_score
                             + p_weight_time * s.time_score + p_weight_importance * s.importance_score
                             + p_weight_confidence * s.confidence_score + p_weight_recency * s.recency_score as score,
                               s.text_score, s.vector_score, s.neighbour_score, s.trigram_score, s.speaker_score,
                               s.date_score, s.time_score, s.importance_score, s.confidence_score, s.recency_score
                          from scored s) as s
                window w as (order by s.score desc, s.last_reinforced_at desc, s.occurred_at desc nulls last,
                                      s.seq desc)) as h
         where h.place < v_pool
    ),
    -- The reranker (memory_plugin/retrieval/rerank.py, whose inputs and arithmetic this repeats exactly, so
    -- that the in-memory stores rank the same): each candidate's session, its neighbours among the
    -- candidates, and the question's names in its text. Only v_pool rows, and only p_limit leave as jsonb.
    -- The pool in place order, as arrays: a candidate's neighbours are found by their position and its session's
    -- first two places by a window, with no join. Joined, the generic plan made on a freshly written database
    -- (few statistics) expected one row per step and nested its loops, 100 x 100 comparisons twice: a LoCoMo
    -- search then cost the server 9.3 ms instead of 5.6 (p50), 4.4 on a database analysed long before.
    pool as (
        select array_agg(h.id order by h.place) as ids, array_agg(h.prev_memory_id order by h.place) as prevs,
               array_agg(h.relative order by h.place) as relatives,
               array_agg(h.rank_weight order by h.place) as rank_weights
          from hybrid h where v_reranks
    ),
    linked as (
        select h.*,
               case when h.session_id is null then null
                    when first_value(h.place) over s <> h.place then first_value(h.place) over s
                    else nth_value(h.place, 2) over s end as other,
               case when h.session_id is null then null
                    when first_value(h.place) over s <> h.place then first_value(h.relative) over s
                    else nth_value(h.relative, 2) over s end as other_relative,
               case when h.session_id is null then null
                    when first_value(h.place) over s <> h.place then first_value(h.rank_weight) over s
                    else nth_value(h.rank_weight, 2) over s end as other_rank_weight,
               p.relatives[n.before] as before_relative,
               -- The candidate whose predecessor this is (the last of them, should there be several).
               p.relatives[n.after[cardinality(n.after)]] as after_relative,
               p.rank_weights[least(n.before, n.after[cardinality(n.after)])] as adjacent_rank_weight
          from hybrid h
         cross join pool p
         cross join lateral (select array_position(p.ids, h.prev_memory_id) as before,
                                    array_positions(p.prevs, h.id) as after offset 0) as n
        window s as (partition by h.session_id order by h.place rows between unbounded preceding and unbounded following)
    ),
    features as (
        select l.*,
               coalesce(l.other_relative, 0) as session_feature,
               coalesce(l.other_rank_weight, 0) as session_rank_feature,
               greatest(coalesce(l.before_relative, 0), coalesce(l.after_relative, 0)) as adjacent_feature,
               coalesce(l.adjacent_rank_weight, 0) as adjacent_rank_feature,
               case when l.other is null then l.relative else greatest(l.relative, l.other_relative) end as session_best
          from linked l
    ),
    reranked as (
        -- sum(weight × input) in rerank.RERANK_FEATURES order, added left to right as Python's sum() does.
        select f.*,
               case when not v_reranks then f.score
                    else p_rerank_weights[1] * f.relative + p_rerank_weights[2] * f.text_score
                       + p_rerank_weights[3] * f.vector_score + p_rerank_weights[4] * f.neighbour_score
                       + p_rerank_weights[5] * f.speaker_score + p_rerank_weights[6] * f.date_score
                       + p_rerank_weights[7] * f.time_score
                       + p_rerank_weights[8] * f.rank_weight
                       + p_rerank_weights[9] * f.session_feature + p_rerank_weights[10] * f.session_rank_feature
                       + p_rerank_weights[11] * f.adjacent_feature + p_rerank_weights[12] * f.adjacent_rank_feature
                       + p_rerank_weights[13] * f.entity_feature + p_rerank_weights[14] * f.session_best
               end as final_score
          from features f
    )
    select to_jsonb(m), r.final_score, r.text_score, r.vector_score, r.neighbour_score, r.trigram_score,
           r.speaker_score, r.date_score, r.time_score, r.importance_score, r.confidence_score, r.recency_score,
           case when v_reranks then r.session_feature else 0 end,
           case when v_reranks then r.adjacent_feature else 0 end,
           r.entity_feature,
           case when v_reranks then r.score end,
           r.prev_memory_id
      from (select x.* from reranked x order by x.final_score desc, x.place limit p_limit) as r
      join public.user_memory m on m.id = r.id and m.user_id = p_user_id
     order by r.final_score desc, r.place;
end;
$$;
