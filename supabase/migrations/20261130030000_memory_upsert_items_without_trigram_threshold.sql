-- memory_upsert_items no longer sets pg_trgm.similarity_threshold: no statement uses the `%` operator it
-- configures since the near-duplicate probe finds its candidates by word keys and compares similarity() itself
-- (20261129010000). Same signature: `create or replace` keeps its grants and comment.
-- See supabase/schemas/20_memory_write.sql.
create or replace function public.memory_upsert_items(
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
    -- One generic plan per statement and connection, made whatever the statistics say, so it must be right
    -- for a user of 10 facts and of 50,000 alike. Planned at each call instead (custom plans), this function
    -- and the triggers of its insert cost 3.4 ms of server CPU a one-fact write (1.8 ms this way) and 2.7 s a
    -- 1,000-fact one (0.4 s). A generic plan made while the tables looked empty once probed the hash through
    -- an index on user_id alone, reading all of the user's rows per item for as long as the connection lived
    -- (a 100-fact write at 10,000 facts: 4 s). So every lookup of a stored row is fenced: it asks for rows in
    -- the order of the one unique index meant to serve it (`>=`, `order by`, `limit 1`), and with sorts and
    -- sequential scans counted as disabled no other plan competes. The `replaces` and slot statements run
    -- only when a write has some, planned then (EXECUTE). These settings reach the triggers of the insert
    -- (their statements are primary-key and unique-index lookups, inserts and transition-table scans).
    set plan_cache_mode = force_generic_plan
    set enable_seqscan = off
    set enable_sort = off
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
            -- lateral: one unique-index lookup per recorded row (fenced, see above).
            return query
                select m.* from unnest(coalesce((select w.record_ids from memory_private.memory_applied_writes w
                                                  where w.user_id = p_user_id and w.write_id = p_write_id), '{}'))
                                with ordinality as r(id, ord)
                 cross join lateral (select * from public.user_memory u
                                      where u.user_id = p_user_id and u.id >= r.id order by u.id limit 1) as m
                 where m.id = r.id
                 order by r.ord;
            return;
        end if;
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
                   -- a stored row with the same hash (current or not: a repeat revives it), fenced (see above)
                   (select h.content_hash
                      from (select m.content_hash from public.user_memory m
                             where m.user_id = p_user_id and m.content_hash >= r.content_hash
                             order by m.content_hash limit 1) as h
                     where h.content_hash = r.content_hash),
                   case when r.kind = 'fact' and r.match_key is not null and r.match_guard is not null
                             and r.match_words is not null and p_near_duplicate_threshold <= 1 then
                       memory_private.memory_near_duplicate(p_user_id, r.category, r.match_guard, r.match_key,
                                                            r.match_words, r.replaces, p_near_duplicate_threshold,
                                                            v_now)
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

    -- 2. `replaces`: the named current facts of this user, other than the rows just written. Planned now (EXECUTE),
    -- for the user's rows as they are. The named row is found by its id: its kind and validity are compared as
    -- one row value, which no partial index's predicate matches (compared one by one, a plan without column
    -- statistics read all of the user's current facts through the trigram index for each named one).
    if cardinality(v_replaced) > 0 then
        execute $sql$
        with superseded as (
            update public.user_memory m
               set invalid_at    = greatest(m.created_at, n.last_reinforced_at),
                   superseded_by = n.id,
                   content_hash  = m.content_hash || ':superseded:' || m.id::text
              -- Several items naming one fact: the last one said replaces it (without this the update would
              -- take any of them, by plan).
              from (select distinct on (r.old_id) r.old_id, r.new_id
                      from unnest($2, $3) with ordinality as r(old_id, new_id, pos)
                     order by r.old_id, r.pos desc) x
              join public.user_memory n on n.id = x.new_id
             where m.id = x.old_id and m.user_id = $1
               and (m.kind, m.invalid_at, m.archived_at) is not distinct from ('fact'::text, null::timestamptz, null::timestamptz)
               and not (m.id = any($4))
            returning m.id
        )
        select coalesce(array_agg(s.id), '{}') from superseded s
        $sql$ into v_more using p_user_id, v_replaced, v_replacer, v_written;
        v_gone := v_gone || v_more;
    end if;

    -- 3. slots: the latest stated current fact of each slot written wins (one written now, on a tie). Planned now.
    if cardinality(v_slots) > 0 then
        execute $sql$
        with winners as (
            select distinct on (c.slot) c.slot, c.id, c.last_reinforced_at
              from public.user_memory c
             where c.user_id = $1 and c.kind = 'fact' and c.slot = any($2)
               and c.invalid_at is null and c.archived_at is null and (c.expires_at is null or c.expires_at > $4)
             order by c.slot, c.last_reinforced_at desc, (c.id = any($3)) desc, c.id
        ),
        superseded as (
            update public.user_memory m
               set invalid_at    = greatest(m.created_at, w.last_reinforced_at),
                   superseded_by = w.id,
                   content_hash  = m.content_hash || ':superseded:' || m.id::text
              from winners w
             where m.user_id = $1 and m.kind = 'fact' and m.slot = w.slot and m.id <> w.id
               and m.invalid_at is null and m.archived_at is null and (m.expires_at is null or m.expires_at > $4)
            returning m.id
        )
        select coalesce(array_agg(s.id), '{}') from superseded s
        $sql$ into v_more using p_user_id, v_slots, v_written, v_now;
        v_gone := v_gone || v_more;
    end if;

    if p_write_id is not null then
        update memory_private.memory_applied_writes set record_ids = v_written || v_gone
         where user_id = p_user_id and write_id = p_write_id;
    end if;

    -- lateral: one unique-index lookup per row (fenced, see above; joined instead, a plan with statistics
    -- behind the table read all of the user's rows).
    return query
        select m.* from unnest(v_written || v_gone) with ordinality as r(id, ord)
         cross join lateral (select * from public.user_memory u
                              where u.user_id = p_user_id and u.id >= r.id order by u.id limit 1) as m
         where m.id = r.id
         order by r.ord;
end;
$$;
