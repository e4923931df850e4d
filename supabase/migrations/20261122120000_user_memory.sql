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

-- The context query reads one user's rows of one kind; the unique key above also starts with user_id.
create index user_memory_user_id_kind_idx on public.user_memory (user_id, kind, last_reinforced_at desc);

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
    (select * from public.user_memory m
      where m.user_id = p_user_id and m.kind = 'fact'
      order by p_weight_importance * (m.importance / 5.0)
             + p_weight_confidence * m.confidence
             + p_weight_recency * greatest(0.0, 1.0 - extract(epoch from (p_now - m.last_reinforced_at))
                                                      / (p_recency_window_days * 86400.0)) desc,
               m.last_reinforced_at desc, m.id
      limit p_max_facts)
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
revoke all on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz) from public, anon;
grant execute on function public.memory_upsert_items(uuid, jsonb, real) to authenticated, service_role;
grant execute on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz) to authenticated, service_role;
