-- user_memory: a user's long-term memory, one row per item: a fact, a preference value, a project, a pattern.
--
-- Every column is typed and readable in the Supabase table editor. A migration file is one transaction:
-- the Supabase CLI applies it as one, and so does memory_plugin's migrator on the embedded database.
-- Requires Supabase's `auth` schema (auth.uid()) and roles anon/authenticated/service_role; outside
-- Supabase the plugin first applies supabase/embedded/auth_shim.sql, which provides them.

create table public.user_memory (
    id                 uuid primary key default gen_random_uuid(),
    -- No foreign key to auth.users: apps may identify users outside Supabase Auth. Erasing a user's
    -- memory is an explicit operation (delete ... where user_id = ...), not a cascade.
    user_id            uuid        not null,
    kind               text        not null check (kind in ('fact', 'preference', 'project', 'pattern')),
    -- fact: preference | requirement | constraint | feedback; preference: the slot it fills;
    -- project and pattern: the kind again (so the column is never null and always filterable).
    category           text        not null,
    content            text        not null check (char_length(content) between 1 and 2000),
    confidence         real        not null default 0.6 check (confidence between 0 and 1),
    source             text        not null default 'inferred' check (source in ('explicit', 'inferred')),
    importance         smallint    not null default 3 check (importance between 1 and 5),
    -- How many times the item was stated (facts, preferences) or observed (patterns) again.
    relevance_count    integer     not null default 0 check (relevance_count >= 0),
    source_message_ids text[]      not null default '{}',
    session_id         text,
    -- Only the structured extras of projects (materials, quantity, status); empty for other kinds.
    attributes         jsonb       not null default '{}'::jsonb,
    -- sha256 of the normalised kind|category|content (or kind|slot for single-valued preferences).
    content_hash       text        not null,
    created_at         timestamptz not null default now(),
    updated_at         timestamptz not null default now(),
    last_reinforced_at timestamptz not null default now(),
    constraint user_memory_user_id_content_hash_key unique (user_id, content_hash),
    constraint user_memory_category_check check (
        (kind = 'fact' and category in ('preference', 'requirement', 'constraint', 'feedback'))
        or (kind = 'preference' and category in
            ('preferred_materials', 'typical_quantities', 'communication_style', 'industry', 'location'))
        or (kind in ('project', 'pattern') and category = kind)
    )
);

comment on table public.user_memory is
    'Long-term conversational memory of each user (memory_plugin). One row per fact, preference value, project or request pattern. RLS: a user sees only their own rows.';
comment on column public.user_memory.relevance_count is 'Times the item was stated or observed again after it was first stored.';
comment on column public.user_memory.content_hash is 'sha256 of the normalised content; unique per user, so repeats reinforce instead of duplicating.';

-- memory_context reads preferences, projects and patterns through the first index; fact ranking
-- (memory_rank_facts) reads only the second, partial one. The unique key above also starts with user_id.
create index user_memory_user_id_kind_idx on public.user_memory (user_id, kind, last_reinforced_at desc);
create index user_memory_fact_rank_idx on public.user_memory
    (user_id, importance, confidence desc, last_reinforced_at desc, id) where kind = 'fact';

create function public.user_memory_touch_updated_at() returns trigger
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
    for each row execute function public.user_memory_touch_updated_at();

-- Row-level security: the database itself keeps users apart, whatever the application code does.
alter table public.user_memory enable row level security;

create policy user_memory_select_own on public.user_memory
    for select to authenticated using ((select auth.uid()) = user_id);
create policy user_memory_insert_own on public.user_memory
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy user_memory_update_own on public.user_memory
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy user_memory_delete_own on public.user_memory
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table public.user_memory from anon, authenticated;
grant select, insert, update, delete on table public.user_memory to authenticated;
grant all on table public.user_memory to service_role;


-- memory_upsert_items: write many items in one statement (one round trip).
-- p_items is a JSON array of objects with the columns below. A repeat of a stored item (same
-- content_hash) reinforces it: confidence rises by p_reinforcement_step (bounded by 1), relevance_count
-- and last_reinforced_at update, importance keeps the max. A single-valued preference slot whose value
-- changed takes the new value and starts over. `security invoker`: RLS applies to the caller.
create function public.memory_upsert_items(p_user_id uuid, p_items jsonb, p_reinforcement_step real default 0.1)
    returns setof public.user_memory
    language sql
    security invoker
    set search_path = ''
as $$
    insert into public.user_memory as m (
        user_id, kind, category, content, confidence, source, importance,
        source_message_ids, session_id, attributes, content_hash, created_at, last_reinforced_at
    )
    select p_user_id, i.kind, i.category, i.content, i.confidence, i.source, i.importance,
           coalesce(i.source_message_ids, '{}'), i.session_id, coalesce(i.attributes, '{}'::jsonb), i.content_hash,
           coalesce(i.occurred_at, now()), coalesce(i.occurred_at, now())
    from jsonb_to_recordset(p_items) as i(
        kind text, category text, content text, confidence real, source text, importance smallint,
        source_message_ids text[], session_id text, attributes jsonb, content_hash text, occurred_at timestamptz
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
        last_reinforced_at = greatest(m.last_reinforced_at, excluded.last_reinforced_at)
    returning m.*;
$$;


-- memory_rank_facts: the user's p_limit best facts by seed 000's score (mirrors memory_plugin/ranking.py):
--     score = w_importance * importance/5 + w_confidence * confidence + w_recency * recency,
--     recency = clamp(1 - age since last reinforcement / window, 0, 1).
-- Exact, without scoring every fact of the user, in three index-only steps over user_memory_fact_rank_idx
-- (user, importance, confidence desc, …), so the cost does not grow with the length of the history:
--  1. older facts (recency 0): within an importance level the score follows confidence, so the best
--     p_limit of each of the 5 levels contain every older fact that can reach the top;
--  2. a seed of recent facts (the most confident p_limit of each level) gives a bar: the p_limit-th best
--     score among step 1 and the seed, which the final p_limit all reach;
--  3. a recent fact scores at most w_i * level/5 + w_c * confidence + w_r, so per level only facts with
--     confidence >= (bar - w_r - w_i * level/5) / w_c can reach the bar: a short range scan of the index.
-- float8 arithmetic throughout (numeric is several times slower); the 1e-6 slack keeps float4 confidence
-- rounding from excluding a fact that ties the bar.
create function public.memory_rank_facts(
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
                         and f.last_reinforced_at > p.cutoff
                       order by f.confidence desc, f.last_reinforced_at desc, f.id
                       limit p_limit) as r
    ),
    -- materialized: computed once (inlined, RLS's wrapper would re-run it for every importance level).
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
                         and f.confidence >= b.min_confidence
                         and f.last_reinforced_at > p.cutoff
                      -- offset 0 keeps this a range scan per level; flattened, the planner may prefer one
                      -- hash join over every recent fact, which is what this function exists to avoid.
                      offset 0) as r
    )
    select c.id, c.score, c.last_reinforced_at
      from (select * from older union all select * from recent) as c
     order by c.score desc, c.last_reinforced_at desc, c.id
     limit p_limit;
$$;

comment on function public.memory_rank_facts is
    'The best-ranked facts of a user (importance, confidence, recency), exact, read from indexes only.';


-- memory_context: what get_memory_context needs for one user, in one round trip: the best-ranked
-- facts (seed 000's score: importance, confidence, recency), every preference value, the latest
-- projects and the most frequent patterns. The ranking mirrors memory_plugin/ranking.py.
create function public.memory_context(
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
    -- lateral: one primary-key lookup per ranked fact (a plain join may hash the user's whole history).
    (select m.* from public.memory_rank_facts(p_user_id, p_max_facts, p_weight_importance, p_weight_confidence,
                                              p_weight_recency, p_recency_window_days, p_now) as best
       cross join lateral (select * from public.user_memory u where u.id = best.id) as m
      order by best.score desc, best.last_reinforced_at desc, best.id)
    union all
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'preference'
      order by m.last_reinforced_at desc, m.id
      limit 100)
    union all
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'project'
      order by m.created_at desc, m.id
      limit p_max_projects)
    union all
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'pattern'
      order by m.relevance_count desc, m.last_reinforced_at desc, m.id
      limit p_max_patterns);
$$;

revoke all on function public.memory_upsert_items(uuid, jsonb, real) from public, anon;
revoke all on function public.memory_rank_facts(uuid, integer, real, real, real, real, timestamptz) from public, anon;
revoke all on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz) from public, anon;
grant execute on function public.memory_upsert_items(uuid, jsonb, real) to authenticated, service_role;
grant execute on function public.memory_rank_facts(uuid, integer, real, real, real, real, timestamptz) to authenticated, service_role;
grant execute on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz) to authenticated, service_role;
