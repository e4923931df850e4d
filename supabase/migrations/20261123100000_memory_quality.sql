-- Memory quality: ten fact categories, near-duplicate de-duplication (pg_trgm), contradictions over time
-- (`replaces` and slots, nothing destroyed), decay of confidence on read, rejections always in the context,
-- history queries. The rules are described in memory_plugin/quality/ (the same rules in Python, for the
-- in-memory store) and in the README ("Keeping memory small, true and current").

-- pg_trgm (trigram similarity) and btree_gist (lets one GiST index hold user_id beside the trigrams) live in
-- the `extensions` schema, as on Supabase. If a project installed pg_trgm elsewhere, it is moved there, so
-- the functions below (search_path = '') can name it.
create schema if not exists extensions;
grant usage on schema extensions to anon, authenticated, service_role;
do $$
declare
    ext text;
begin
    foreach ext in array array['pg_trgm', 'btree_gist'] loop
        if exists (select from pg_extension e join pg_namespace n on n.oid = e.extnamespace
                    where e.extname = ext and n.nspname <> 'extensions') then
            execute format('alter extension %I set schema extensions', ext);
        end if;
        execute format('create extension if not exists %I with schema extensions', ext);
    end loop;
end
$$;


-- Seed 004's categories, seed 002's rejection and seed 000's memory types (PREFERENCE is `preference`).
alter table public.user_memory drop constraint user_memory_category_check;
alter table public.user_memory add constraint user_memory_category_check check (
    (kind = 'fact' and category in ('preference', 'requirement', 'constraint', 'feedback', 'rejection',
                                    'goal', 'routine', 'contact', 'health_note', 'fact'))
    or (kind = 'preference' and category in
        ('preferred_materials', 'typical_quantities', 'communication_style', 'industry', 'location'))
    or (kind in ('project', 'pattern') and category = kind)
);

-- Keys computed once in Python when a fact is written (memory_plugin/quality/), compared here.
alter table public.user_memory
    add column slot        text,
    add column match_key   text,
    add column match_guard text,
    add column match_words text[];

comment on column public.user_memory.slot is
    'Facts: what single-valued subject it is about (budget, lead_time, material:7075); a newer current fact of the same slot supersedes it.';
comment on column public.user_memory.match_key is
    'Facts: the content without case, accents or extra spaces; compared with pg_trgm similarity to find near-duplicates.';
comment on column public.user_memory.match_words is
    'Facts: content words cut to 5 letters; a near-duplicate adds or drops words, never swaps one ("viernes" for "lunes").';
comment on column public.user_memory.match_guard is
    'Facts: negation and the numbers/codes in the content; near-duplicates must have the same guard ("aluminio 7075" is not "aluminio 6061").';

-- Rows written before this migration: their key is their lower-cased content (accents kept), and they have no
-- guard, so they take part in near-duplicate matching once stated again (an exact repeat fills both in).
update public.user_memory set match_key = lower(content) where kind = 'fact';

-- A replayed write returns the rows its first application produced (a near-duplicate lands on another row's
-- content_hash, so the items' own hashes no longer find them).
alter table public.memory_applied_writes add column record_ids uuid[];
-- memory_upsert_items fills record_ids in after the rows are written, as the user (security invoker), so a
-- user may now update their own write records. Nothing else: the row stays theirs (with check), and changing
-- record_ids only changes what a replay of their own write returns.
create policy memory_applied_writes_update_own on public.memory_applied_writes
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);


-- Indexes. Ranking reads facts other than rejections (rejections have their own branch of memory_context);
-- `category` rides along so the decay (half-life per category) is computed from the index alone.
drop index public.user_memory_fact_rank_idx;
create index user_memory_fact_rank_idx on public.user_memory
    (user_id, importance, confidence desc, last_reinforced_at desc, id) include (expires_at, category)
    where kind = 'fact' and invalid_at is null and archived_at is null and category <> 'rejection';
-- The most recently reinforced facts of each importance level: the seed of memory_rank_facts' bar (below).
create index user_memory_fact_recent_idx on public.user_memory
    (user_id, importance, last_reinforced_at desc, id) include (confidence, expires_at, category)
    where kind = 'fact' and invalid_at is null and archived_at is null and category <> 'rejection';
create index user_memory_rejection_idx on public.user_memory (user_id, last_reinforced_at desc, id)
    where kind = 'fact' and invalid_at is null and archived_at is null and category = 'rejection';
-- Near-duplicates: the user's current facts of a category and guard whose trigrams resemble the new fact's.
-- GiST over all four conditions (btree_gist for the equalities): the tree is split by user first, so a probe
-- costs what that user's facts cost. Measured on 113,000 rows (a user with 13,000 facts of a 20-word
-- vocabulary, the worst case for trigrams), one probe: GiST 1.7 ms for that user and 0.04 ms for a new user;
-- GIN over the same columns 2.8 to 70 ms and 1.1 ms, because it reads the posting lists of every user's rows
-- sharing the category and the trigrams; GiST on (user_id, match_key) alone 5.3 ms.
create index user_memory_fact_match_idx on public.user_memory
    using gist (user_id, category, match_guard, match_key extensions.gist_trgm_ops)
    where kind = 'fact' and invalid_at is null and archived_at is null;
create index user_memory_fact_slot_idx on public.user_memory (user_id, slot)
    where kind = 'fact' and slot is not null and invalid_at is null and archived_at is null;


-- memory_upsert_items: as in 20261122120000_user_memory.sql (batch insert or reinforce), with the write_id
-- of 20261122130000_idempotent_writes.sql, the columns of 20261123090000_memory_validity.sql, plus the quality
-- rules, all in the same single statement and transaction:
--  1. near-duplicates: a fact item with no stored row of the same content_hash, similar (pg_trgm similarity
--     of match_key >= p_near_duplicate_threshold, same category, same match_guard, one's match_words within
--     the other's) to a current fact of the user other than the one it `replaces`, reinforces that fact
--     instead of inserting a row. Items landing on the same row are folded first
--     (confidence and importance max, provenance accumulated), so the ON CONFLICT touches each row once.
--     A threshold above 1 turns this off.
--  2. `replaces`: an item naming a current fact of the user supersedes it: the old row gets invalid_at (when
--     the new fact was stated) and superseded_by (the new row).
--  3. slots: for every slot written, the most recently stated current fact of that slot stays current; the
--     user's other current facts of the slot are superseded by it.
-- A superseded row keeps everything but its content_hash, which gets a ':superseded:<id>' suffix: the unique
-- key is freed, so stating the old value again later inserts a new row and the history keeps both periods.
-- Returned: the rows written, then the rows superseded (invalid_at set). With p_write_id, their ids are
-- recorded, and a replay returns the same rows as they are now.
drop function public.memory_upsert_items(uuid, jsonb, real);
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
        insert into public.memory_applied_writes (write_id, user_id, item_count)
        values (p_write_id, p_user_id, jsonb_array_length(p_items))
        on conflict (write_id) do nothing;
        if not found then
            return query
                select m.* from public.user_memory m
                 where m.user_id = p_user_id
                   and (m.id = any(coalesce((select w.record_ids from public.memory_applied_writes w
                                              where w.write_id = p_write_id and w.user_id = p_user_id), '{}'))
                        -- writes recorded before record_ids existed: their items' hashes, as before
                        or (m.content_hash in (select i ->> 'content_hash' from jsonb_array_elements(p_items) as i)
                            and exists (select from public.memory_applied_writes w
                                         where w.write_id = p_write_id and w.record_ids is null)));
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
            -- The stored wording keeps its own keys; rows from before these columns existed get them now.
            slot               = coalesce(m.slot, excluded.slot),
            match_key          = case when m.match_guard is null then excluded.match_key else m.match_key end,
            match_guard        = coalesce(m.match_guard, excluded.match_guard),
            match_words        = case when m.match_words is null then excluded.match_words else m.match_words end
        returning m.id, m.content_hash, m.kind, m.slot
    ),
    -- Each written row's item (position, `replaces`). Measured with 1,000 items: this join is hashed (40 ms for
    -- the whole statement, 23 ms before these rules); a jsonb map of hash -> item instead cost 150 ms (the map
    -- is copied at every lookup).
    joined as (
        select w.id, w.kind, w.slot, f.ord, f.any_replaces as replaces
          from written w join folded f on f.target_hash = w.content_hash
    )
    select coalesce(array_agg(j.id order by j.ord), '{}'),
           coalesce(array_agg(j.replaces) filter (where j.replaces is not null and j.replaces <> j.id), '{}'),
           coalesce(array_agg(j.id) filter (where j.replaces is not null and j.replaces <> j.id), '{}'),
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
              from unnest(v_replaced, v_replacer) as x(old_id, new_id)
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
        update public.memory_applied_writes set record_ids = v_written || v_gone
         where write_id = p_write_id and user_id = p_user_id;
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


-- memory_rank_facts: seed 000's score over the decayed confidence, exact, from the index alone.
--     decayed   = confidence * 2^(-age / half_life[category])   (age since last_reinforced_at; no half-life: 1)
--     score     = w_importance * importance/5 + w_confidence * decayed + w_recency * recency
-- Facts whose decayed confidence is below p_decay_floor, rejections, and non-current facts are not ranked.
--
-- Decay breaks the old shortcut (within an importance level, older facts in confidence order), so the
-- bound is now on confidence alone, for facts of every age:
--  1. a seed, per level, of the p_limit most confident facts and the 4 * p_limit most recently reinforced
--     ones (recent facts have barely decayed and earn the recency bonus, so they score near the top; with
--     the most confident alone, the bar was 0.1 lower and the range below 4 times longer), each scored
--     exactly, gives a bar: the p_limit-th best seed score, which the final p_limit all reach;
--  2. a fact scores at most w_i * level/5 + w_c * confidence + w_r (decay and recency are at most 1), so
--     per level only facts with confidence >= (bar - w_r - w_i * level/5) / w_c can reach the bar: one
--     short range scan of the index per level, scored exactly, of which the best p_limit are returned.
-- Cost: the facts at the top levels whose stored confidence is near the best decayed scores, a few hundred
-- at 10,000 facts (bench/run.py, table (b)). Stale facts leave the index when maintenance archives them.
-- exp() is clamped at -700: PostgreSQL raises an error on float underflow rather than returning 0. The CASE
-- lists the ranked categories of the check constraint above (rejections are not ranked).
drop function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz);
drop function public.memory_rank_facts(uuid, integer, real, real, real, real, timestamptz);
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


-- memory_context: as before, plus the user's current rejections ("never suggest X", newest first, at most
-- p_max_rejections) right after the ranked facts: they always reach the prompt, whatever their rank.
-- Decay parameters as in memory_rank_facts; their defaults (no decay) keep older callers working.
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

revoke all on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) from public, anon;
revoke all on function public.memory_rank_facts(uuid, integer, real, real, real, real, timestamptz, jsonb, real) from public, anon;
revoke all on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz, jsonb, real, integer) from public, anon;
revoke all on function public.memory_fact_history(uuid, timestamptz, boolean, integer) from public, anon;
grant execute on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) to authenticated, service_role;
grant execute on function public.memory_rank_facts(uuid, integer, real, real, real, real, timestamptz, jsonb, real) to authenticated, service_role;
grant execute on function public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz, jsonb, real, integer) to authenticated, service_role;
grant execute on function public.memory_fact_history(uuid, timestamptz, boolean, integer) to authenticated, service_role;
