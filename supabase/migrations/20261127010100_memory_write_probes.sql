-- Writes whose cost does not grow with the user's memory.
--
-- memory_upsert_items and memory_upsert_embedded: custom plans (plan_cache_mode = force_custom_plan), made at each
-- call for the tables as they are. The near-duplicate probes (trigram and embedding) are functions of their own
-- whose plans are fixed to a bounded index probe (50 candidates) by their own planner settings. Their generic plans were made once per connection, on
-- its first write: while the tables looked empty they probed the hash and the near-duplicates through an index on
-- user_id alone, so every later write read all of the user's rows per item (a 100-fact write at 3,000 facts:
-- 1,400 ms, 55 ms when planned at that size).
--
-- user_memory_fact_match_idx: trigram signatures of 256 bytes instead of 12. With 12, a user's facts sharing a
-- category and guard filled every signature and a near-duplicate probe compared them all (6.7 ms at 10,000
-- facts); with 256 it reads a few pages (0.2-0.4 ms at 10,000 and 50,000 facts).

drop index public.user_memory_fact_match_idx;
create index user_memory_fact_match_idx on public.user_memory
    using gist (user_id, category, match_guard, match_key extensions.gist_trgm_ops (siglen = 256))
    where kind = 'fact' and invalid_at is null and archived_at is null;

-- memory_private.memory_near_duplicate: the content_hash of the stored fact a fact item is a near-duplicate of
-- (rule 1 of memory_upsert_items), or null. The 50 most similar current facts of the item's category and guard,
-- nearest first from the trigram index user_memory_fact_match_idx, then the rule. 50 bounds the work per item
-- (0.2-0.4 ms at 10,000 and 50,000 facts of one guard); more than 50 stored wordings at least this similar do
-- not occur in practice. `%` (pg_trgm.similarity_threshold, set by the caller) must be an index condition:
-- it prunes the index pages no fact at least that similar is on. Without it the ordered scan read 75 ms an
-- item at 50,000 facts sharing most trigrams. Security definer for that: under the caller's RLS, `%` (not
-- leakproof) is no index condition, and a 200-fact write at 800 facts took 5.4 s. It reads the caller's own
-- facts only: for an `authenticated` caller p_user_id must be auth.uid(), or nothing is found (tests/
-- test_cross_tenant.py calls it with another user's id). The planner settings are this statement's alone (not the triggers' of the insert
-- that follows): ordering by `<->` is what only that index provides, so with sequential scans, bitmap scans
-- and sorts counted as disabled the plan is that index whatever the statistics say. Planned per call: made on
-- a table that looked empty, a plan through the user_id index sorted all of the user's facts (5.7 ms an item
-- at 3,000 facts).
create function memory_private.memory_near_duplicate(
    p_user_id uuid, p_category text, p_guard text, p_key text, p_words text[], p_replaces uuid,
    p_threshold real, p_now timestamptz
)
    returns text
    language sql
    stable
    security definer
    set search_path = ''
    set plan_cache_mode = force_custom_plan
    set enable_seqscan = off
    set enable_bitmapscan = off
    set enable_sort = off
as $$
    select c.content_hash
      from (select m.content_hash, m.id, m.match_key, m.match_words, m.last_reinforced_at
              from public.user_memory m
             where m.user_id = p_user_id and m.kind = 'fact'
               and m.invalid_at is null and m.archived_at is null
               and m.category = p_category and m.match_guard = p_guard
               and m.match_key operator(extensions.%) p_key
               and (m.expires_at is null or m.expires_at > p_now)
               -- the caller's own facts only (see above); service_role and the owner write for any user
               and (p_user_id = (select auth.uid()) or coalesce(current_setting('role', true), '') <> 'authenticated')
             order by m.match_key operator(extensions.<->) p_key
             limit 50) as c
     -- words added or dropped, none swapped; and never the fact it replaces
     where (c.match_words operator(pg_catalog.<@) p_words or p_words operator(pg_catalog.<@) c.match_words)
       and c.id is distinct from p_replaces
       and extensions.similarity(c.match_key, p_key) >= p_threshold
     order by extensions.similarity(c.match_key, p_key) desc, c.last_reinforced_at desc, c.id
     limit 1
$$;

revoke all on function memory_private.memory_near_duplicate(uuid, text, text, text, text[], uuid, real, timestamptz)
    from public, anon;
grant execute on function memory_private.memory_near_duplicate(uuid, text, text, text, text[], uuid, real, timestamptz)
    to authenticated, service_role;

-- memory_private.memory_near_embedded: the content_hash of the current fact of the item's category and guard
-- whose vector (of p_model) is the nearest at cosine similarity >= p_threshold, or null. Among the user's 50
-- nearest vectors, from the partition's HNSW index (the caller sets hnsw.iterative_scan, so the walk goes on
-- until 50 of the user's vectors turned up, at most hnsw.max_scan_tuples): the work per item is bounded,
-- where the exact scan of the user's facts of the guard grew with them. A nearer fact of another category or
-- guard takes one of the 50 places; the same rule in Python (quality/semantic.py) agrees whenever the user
-- has at most 50 vectors nearer than the match. Sorts count as disabled, so the ordered HNSW scan is chosen
-- whatever the statistics say (not an index-only read of all of the user's vectors and a sort).
create function memory_private.memory_near_embedded(
    p_user_id uuid, p_model text, p_vec extensions.halfvec(384), p_category text, p_guard text, p_replaces uuid,
    p_threshold real, p_now timestamptz
)
    returns text
    language sql
    stable
    security invoker
    set search_path = ''
    set plan_cache_mode = force_custom_plan
    set enable_seqscan = off
    set enable_sort = off
as $$
    select m.content_hash
      from (select d.memory_id, d.embedding operator(extensions.<=>) p_vec as distance
              from public.memory_search_docs d
             where d.user_id = p_user_id and d.embedding_model = p_model
             order by d.embedding operator(extensions.<=>) p_vec
             limit 50) as c
      -- one primary-key lookup per candidate
      cross join lateral (select u.* from public.user_memory u
                           where u.user_id = p_user_id and u.id = c.memory_id offset 0) as m
     where m.kind = 'fact' and m.invalid_at is null and m.archived_at is null
       and (m.expires_at is null or m.expires_at > p_now)
       and m.category = p_category and m.match_guard = p_guard
       and m.id is distinct from p_replaces
       and 1 - c.distance >= p_threshold
     order by c.distance, m.last_reinforced_at desc, m.id
     limit 1
$$;

revoke all on function memory_private.memory_near_embedded(uuid, text, extensions.halfvec, text, text, uuid, real,
                                                           timestamptz) from public, anon;
grant execute on function memory_private.memory_near_embedded(uuid, text, extensions.halfvec, text, text, uuid, real,
                                                              timestamptz) to authenticated, service_role;

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
    -- Custom plans, made at each call for the user's rows as they are now (about a millisecond). A generic
    -- plan is made once per connection: made on the connection's first write, while the tables looked
    -- empty, it probed the hash and the near-duplicates through an index on user_id alone, reading all of
    -- the user's rows per item for as long as the connection lived (a 100-fact write at 3,000 facts:
    -- 1,400 ms, against 55 ms planned at that size). The near-duplicate probe's plan is fixed in
    -- memory_near_duplicate, whose planner settings do not reach this function's other statements or the
    -- triggers of its insert.
    set plan_cache_mode = force_custom_plan
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
            -- lateral: one primary-key lookup per recorded row.
            return query
                select m.* from unnest(coalesce((select w.record_ids from memory_private.memory_applied_writes w
                                                  where w.user_id = p_user_id and w.write_id = p_write_id), '{}'))
                                with ordinality as r(id, ord)
                 cross join lateral (select * from public.user_memory u
                                      where u.id = r.id and u.user_id = p_user_id offset 0) as m
                 order by r.ord;
            return;
        end if;
    end if;

    -- The `%` operator's threshold, for this transaction only: the trigram index then returns only rows at
    -- least as similar as the threshold, and similarity() confirms each one exactly (memory_near_duplicate).
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

    -- 2. `replaces`: the named current facts of this user, other than the rows just written.
    if cardinality(v_replaced) > 0 then
        with superseded as (
            update public.user_memory m
               set invalid_at    = greatest(m.created_at, n.last_reinforced_at),
                   superseded_by = n.id,
                   content_hash  = m.content_hash || ':superseded:' || m.id::text
              -- Several items naming one fact: the last one said replaces it (without this the update would
              -- take any of them, by plan).
              from (select distinct on (r.old_id) r.old_id, r.new_id
                      from unnest(v_replaced, v_replacer) with ordinality as r(old_id, new_id, pos)
                     order by r.old_id, r.pos desc) x
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
        update memory_private.memory_applied_writes set record_ids = v_written || v_gone
         where user_id = p_user_id and write_id = p_write_id;
    end if;

    -- lateral, kept apart by `offset 0`: one primary-key lookup per row (joined instead, a custom plan with
    -- statistics behind the table read all of the user's rows).
    return query
        select m.* from unnest(v_written || v_gone) with ordinality as r(id, ord)
         cross join lateral (select * from public.user_memory u where u.id = r.id offset 0) as m
         order by r.ord;
end;
$$;

create or replace function public.memory_upsert_embedded(
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
    -- As memory_upsert_items: custom plans, made at each call for the tables as they are (a generic plan made
    -- on a connection's first write, when the tables look empty, scanned all of the user's facts per item).
    set plan_cache_mode = force_custom_plan
as $$
declare
    v_ids   uuid[];
    v_items jsonb := p_items;
    v_now   timestamptz := now();
begin
    -- A replayed write (known write_id) changes nothing: memory_upsert_items returns its rows as they are.
    if p_model is not null and p_embedding_threshold <= 1
       and (p_write_id is null
            or not exists (select from memory_private.memory_applied_writes w
                            where w.user_id = p_user_id and w.write_id = p_write_id)) then
        -- memory_near_embedded walks HNSW until enough of the user's vectors turned up (this transaction).
        perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
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
          -- The nearest current fact of the category and guard among the user's 50 nearest vectors.
          left join lateral (
              select memory_private.memory_near_embedded($2, $3, q.vec, e.item ->> 'category',
                                                         e.item ->> 'match_guard', (e.item ->> 'replaces')::uuid,
                                                         $4, $5) as target
               where q.vec is not null
          ) as t on true
        $sql$ into v_items using p_items, p_user_id, p_model, p_embedding_threshold, v_now;
    end if;

    select array_agg(w.id order by w.ordinality) into v_ids
      from public.memory_upsert_items(p_user_id, v_items, p_reinforcement_step, p_write_id,
                                      p_near_duplicate_threshold) with ordinality as w;
    -- Neighbours follow the order the items were given (memory_upsert_items inserts by content hash), re-made
    -- for the facts this write inserted (a repeat keeps its neighbours; an item merged into a near-duplicate
    -- finds no row of its own hash).
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
    -- lateral, kept apart by `offset 0`: one primary-key lookup per row (joined, a scan of the user's rows).
    return query
        select m.* from unnest(v_ids) with ordinality as w(id, n)
         cross join lateral (select * from public.user_memory u where u.id = w.id offset 0) as m
         order by w.n;
end;
$$;
