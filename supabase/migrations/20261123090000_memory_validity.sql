-- Validity over time: when a memory was learned, until when it holds, what replaced it, extra metadata.
--
-- Nothing is destroyed when a memory stops being true: a superseded or retracted fact keeps its row with
-- `invalid_at` set (and `superseded_by` pointing at its replacement), so history stays queryable ("what
-- did the user prefer in March?"); an expired or archived one keeps its row too. Only rows that are
-- currently valid (`invalid_at` and `archived_at` null, `expires_at` null or in the future) reach a prompt:
-- memory_rank_facts and memory_context below filter them, in SQL, at read time (no nightly rewrite needed).

alter table public.user_memory
    add column occurred_at   timestamptz,
    add column expires_at    timestamptz,
    add column invalid_at    timestamptz,
    add column superseded_by uuid references public.user_memory (id) on delete set null,
    add column archived_at   timestamptz,
    add column metadata      jsonb not null default '{}'::jsonb;

comment on column public.user_memory.occurred_at is 'When the conversation that stated it happened (provenance); null when unknown.';
comment on column public.user_memory.expires_at is 'Temporary memories ("trip this weekend"): never shown after this time.';
comment on column public.user_memory.invalid_at is 'When it stopped being true (contradicted or retracted); the row is kept as history.';
comment on column public.user_memory.superseded_by is 'The memory that replaced this one, if any.';
comment on column public.user_memory.archived_at is 'Set by maintenance when its decayed confidence fell below the floor; kept, never shown.';
comment on column public.user_memory.metadata is 'Caller-supplied extras (e.g. a conversation turn id, a speaker).';

-- The index behind fact ranking now covers only facts that can be shown; `expires_at` rides along so the
-- expiry check stays index-only.
drop index public.user_memory_fact_rank_idx;
create index user_memory_fact_rank_idx on public.user_memory
    (user_id, importance, confidence desc, last_reinforced_at desc, id) include (expires_at)
    where kind = 'fact' and invalid_at is null and archived_at is null;
create index user_memory_superseded_by_idx on public.user_memory (superseded_by) where superseded_by is not null;


-- memory_upsert_items: as before (see 20261122130000_idempotent_writes.sql), and items may carry
-- `occurred_at` (also stored as such), `expires_at` and `metadata`. A repeat keeps the earliest
-- occurred_at, the latest expiry (null = never expires wins) and merges metadata; a repeat of an invalid
-- or archived item brings it back (it was stated again).
create or replace function public.memory_upsert_items(
    p_user_id uuid,
    p_items jsonb,
    p_reinforcement_step real default 0.1,
    p_write_id uuid default null
)
    returns setof public.user_memory
    language plpgsql
    security invoker
    set search_path = ''
as $$
begin
    if p_write_id is not null then
        insert into public.memory_applied_writes (write_id, user_id, item_count)
        values (p_write_id, p_user_id, jsonb_array_length(p_items))
        on conflict (write_id) do nothing;
        if not found then
            return query
                select m.* from public.user_memory m
                 where m.user_id = p_user_id
                   and m.content_hash in (select i ->> 'content_hash' from jsonb_array_elements(p_items) as i);
            return;
        end if;
    end if;

    return query
    insert into public.user_memory as m (
        user_id, kind, category, content, confidence, source, importance,
        source_message_ids, session_id, attributes, content_hash, created_at, last_reinforced_at,
        occurred_at, expires_at, metadata
    )
    select p_user_id, i.kind, i.category, i.content, i.confidence, i.source, i.importance,
           coalesce(i.source_message_ids, '{}'), i.session_id, coalesce(i.attributes, '{}'::jsonb), i.content_hash,
           coalesce(i.occurred_at, now()), coalesce(i.occurred_at, now()),
           i.occurred_at, i.expires_at, coalesce(i.metadata, '{}'::jsonb)
    from jsonb_to_recordset(p_items) as i(
        kind text, category text, content text, confidence real, source text, importance smallint,
        source_message_ids text[], session_id text, attributes jsonb, content_hash text, occurred_at timestamptz,
        expires_at timestamptz, metadata jsonb
    )
    on conflict (user_id, content_hash) do update set
        -- Same hash means the same item, however it is spelt, so the first wording stays; only a
        -- single-valued preference slot (hashed by slot) can change value, and then it starts over.
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
        -- Provenance accumulates (bounded, newest kept) so a reinforced fact still says where it came from.
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
        archived_at        = null
    returning m.*;
end;
$$;


-- memory_rank_facts: unchanged ranking (see 20261122120000_user_memory.sql), over valid, unexpired facts only.
create or replace function public.memory_rank_facts(
    p_user_id uuid,
    p_limit integer,
    p_weight_importance real,
    p_weight_confidence real,
    p_weight_recency real,
    p_recency_window_days real,
    p_now timestamptz
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
               p_now - make_interval(secs => greatest(p_recency_window_days::float8, 0) * 86400) as cutoff
    ),
    older as (
        select o.* from params p, generate_series(1, 5) as level(importance),
             lateral (select f.id, f.last_reinforced_at, p.wi * f.importance + p.wc * f.confidence as score
                        from public.user_memory f
                       where f.user_id = p_user_id and f.kind = 'fact' and f.importance = level.importance
                         and f.invalid_at is null and f.archived_at is null
                         and (f.expires_at is null or f.expires_at > p_now)
                         and f.last_reinforced_at <= p.cutoff
                       order by f.confidence desc, f.last_reinforced_at desc, f.id
                       limit p_limit) as o
    ),
    recent_seed as (
        select r.* from params p, generate_series(1, 5) as level(importance),
             lateral (select f.id, f.last_reinforced_at,
                             p.wi * f.importance + p.wc * f.confidence
                           + p.wr * least(1, greatest(0, 1 - (p.now_s - date_part('epoch', f.last_reinforced_at))
                                                             / p.window_s)) as score
                        from public.user_memory f
                       where f.user_id = p_user_id and f.kind = 'fact' and f.importance = level.importance
                         and f.invalid_at is null and f.archived_at is null
                         and (f.expires_at is null or f.expires_at > p_now)
                         and f.last_reinforced_at > p.cutoff
                       order by f.confidence desc, f.last_reinforced_at desc, f.id
                       limit p_limit) as r
    ),
    bar as materialized (
        select coalesce((select c.score from (select score from older union all select score from recent_seed) as c
                          order by c.score desc offset greatest(p_limit, 1) - 1 limit 1),
                        '-infinity'::float8) as score
    ),
    bounds as materialized (
        select level.importance,
               case when p.wc <= 0 then '-infinity'::float8
                    else (bar.score - p.wr - p.wi * level.importance) / p.wc - 1e-6 end as min_confidence
          from params p, bar, generate_series(1, 5) as level(importance)
    ),
    recent as (
        select r.* from params p, bounds b,
             lateral (select f.id, f.last_reinforced_at,
                             p.wi * f.importance + p.wc * f.confidence
                           + p.wr * least(1, greatest(0, 1 - (p.now_s - date_part('epoch', f.last_reinforced_at))
                                                             / p.window_s)) as score
                        from public.user_memory f
                       where f.user_id = p_user_id and f.kind = 'fact' and f.importance = b.importance
                         and f.invalid_at is null and f.archived_at is null
                         and (f.expires_at is null or f.expires_at > p_now)
                         and f.confidence >= b.min_confidence
                         and f.last_reinforced_at > p.cutoff
                      offset 0) as r
    )
    select c.id, c.score, c.last_reinforced_at
      from (select * from older union all select * from recent) as c
     order by c.score desc, c.last_reinforced_at desc, c.id
     limit p_limit;
$$;


-- memory_context: as before, and only currently valid preferences, projects and patterns.
create or replace function public.memory_context(
    p_user_id uuid,
    p_max_facts integer default 12,
    p_max_projects integer default 3,
    p_max_patterns integer default 3,
    p_weight_importance real default 0.6,
    p_weight_confidence real default 0.3,
    p_weight_recency real default 0.1,
    p_recency_window_days real default 30,
    p_now timestamptz default now()
)
    returns setof public.user_memory
    language sql
    stable
    security invoker
    set search_path = ''
as $$
    (select m.* from public.memory_rank_facts(p_user_id, p_max_facts, p_weight_importance, p_weight_confidence,
                                              p_weight_recency, p_recency_window_days, p_now) as best
       cross join lateral (select * from public.user_memory u where u.id = best.id) as m
      order by best.score desc, best.last_reinforced_at desc, best.id)
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
