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
