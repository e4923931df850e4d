-- Writes: memory_upsert_items (the write rules), memory_set_embeddings (vectors onto stored facts) and
-- memory_upsert_embedded (both in one round trip, plus near-duplicates by embedding). All `security invoker`:
-- RLS applies to the caller.

-- memory_private.memory_near_duplicate: the content_hash of the stored fact a fact item is a near-duplicate of
-- (rule 1 of memory_upsert_items), or null: the most similar current fact of the item's category and guard whose
-- content words include all of the item's or are all among them, at trigram similarity >= p_threshold, other
-- than the fact it replaces. The candidates come from the words (user_memory_fact_words_idx: the facts holding
-- every word of the item; user_memory_fact_prefix_idx, or past 10 words user_memory_fact_anchor_idx: the facts
-- with fewer words, all among the item's), so a probe reads what shares the item's words whatever the user's
-- size; each candidate's similarity is then computed exactly, so no similar fact is missed for a nearer one
-- that fails the word rule (the trigram probe this replaces took the 50 nearest, then the rule). Security
-- definer: under the caller's RLS, `@>` and `= any` over the key functions are no index conditions (not
-- leakproof). It reads the caller's own facts only: for an `authenticated` caller p_user_id must be auth.uid(),
-- or nothing is found (tests/test_cross_tenant.py calls it with another user's id). The fence: with sequential and plain index scans
-- counted as disabled, the only plan is a BitmapOr of those three indexes (the one not used given no keys),
-- whatever the statistics said when the connection's generic plan was made: no other index has a condition
-- here (the row's user, kind, category, guard and validity are compared as one row value, which no index or
-- partial predicate matches).
create function memory_private.memory_near_duplicate(
    p_user_id uuid, p_category text, p_guard text, p_key text, p_words text[], p_replaces uuid,
    p_threshold real, p_now timestamptz
)
    returns text
    language sql
    stable
    security definer
    set search_path = ''
    set plan_cache_mode = force_generic_plan
    set enable_seqscan = off
    set enable_indexscan = off
    set enable_indexonlyscan = off
as $$
    select c.content_hash
      from public.user_memory c
     where (memory_private.memory_fact_word_keys(c.user_id, c.category, c.match_guard,
                                                 c.match_words operator(pg_catalog.||) ''::text)
                operator(pg_catalog.@>)
            memory_private.memory_fact_word_keys(p_user_id, p_category, p_guard,
                                                 case when pg_catalog.cardinality(p_words) > 0 then p_words
                                                      else '{""}'::text[] end)
            or (memory_private.memory_fact_prefix(c.user_id, c.category, c.match_guard, c.match_words)
                    operator(pg_catalog.=) any (case when pg_catalog.cardinality(p_words) <= 10 then
                        memory_private.memory_fact_prefixes(p_user_id, p_category, p_guard, p_words) end)
                and pg_catalog.cardinality(c.match_words) < pg_catalog.cardinality(p_words))
            or (memory_private.memory_fact_anchor(c.user_id, c.category, c.match_guard, c.match_words)
                    operator(pg_catalog.=) any (case when pg_catalog.cardinality(p_words) > 10 then
                        memory_private.memory_fact_word_keys(p_user_id, p_category, p_guard,
                                                             p_words operator(pg_catalog.||) ''::text) end)
                and pg_catalog.cardinality(c.match_words) < pg_catalog.cardinality(p_words)))
       and (c.user_id, c.kind, c.category, c.match_guard, c.invalid_at, c.archived_at) is not distinct from
           (p_user_id, 'fact'::text, p_category, p_guard, null::timestamptz, null::timestamptz)
       and (c.expires_at is null or c.expires_at > p_now)
       -- words added or dropped, none swapped (a hash collision is rejected here); never the fact it replaces
       and (c.match_words operator(pg_catalog.<@) p_words or p_words operator(pg_catalog.<@) c.match_words)
       and c.id is distinct from p_replaces
       and extensions.similarity(c.match_key, p_key) >= p_threshold
       -- the caller's own facts only (see above); service_role and the owner write for any user
       and (p_user_id = (select auth.uid()) or coalesce(current_setting('role', true), '') <> 'authenticated')
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
-- whatever the statistics say (not an index-only read of all of the user's vectors and a sort), and each
-- candidate's fact is read in id order from a unique index (`>=`, `order by`, `limit 1`: no other index gives
-- that order): one generic plan per connection is safe, even one made while the tables looked empty.
create function memory_private.memory_near_embedded(
    p_user_id uuid, p_model text, p_vec extensions.halfvec(384), p_category text, p_guard text, p_replaces uuid,
    p_threshold real, p_now timestamptz
)
    returns text
    language sql
    stable
    security invoker
    set search_path = ''
    set plan_cache_mode = force_generic_plan
    set enable_seqscan = off
    set enable_sort = off
as $$
    select m.content_hash
      from (select d.memory_id, d.embedding operator(extensions.<=>) p_vec as distance
              from public.memory_search_docs d
             where d.user_id = p_user_id and d.embedding_model = p_model
             order by d.embedding operator(extensions.<=>) p_vec
             limit 50) as c
      -- one unique-index lookup per candidate
      cross join lateral (select u.* from public.user_memory u
                           where u.user_id = p_user_id and u.id >= c.memory_id
                           order by u.id limit 1) as m
     where m.id = c.memory_id and m.kind = 'fact' and m.invalid_at is null and m.archived_at is null
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

-- memory_upsert_items: write a batch of items in one statement (one round trip). p_items is a JSON array of
-- objects with the columns below (memory_plugin.rows.MemoryItem). Rules, all in one transaction:
--  0. exact repeat: an item whose content_hash the user already has reinforces that row: confidence rises by
--     p_reinforcement_step (bounded by 1), relevance_count and last_reinforced_at update, importance keeps the
--     max, provenance accumulates (the newest 50 message ids). A single-valued preference slot (hashed by
--     slot) whose value changed takes the new value and starts over. A superseded or archived row of that
--     hash is revived.
--  1. near-duplicates: a fact item with no stored row of its hash, similar (pg_trgm similarity of match_key
--     >= p_near_duplicate_threshold, same category, same match_guard, one's match_words within the other's)
--     to a current fact of the user other than the one it `replaces`, reinforces that fact instead of
--     inserting a row. Items landing on the same row are folded first (confidence and importance max,
--     provenance accumulated), so the ON CONFLICT touches each row once. A threshold above 1 turns this off.
--  2. `replaces`: an item naming a current fact of the user supersedes it: the old row gets invalid_at (when
--     the new fact was stated) and superseded_by (the new row).
--  3. slots: for every slot written, the most recently stated current fact of that slot stays current; the
--     user's other current facts of the slot are superseded by it.
-- A superseded row keeps everything but its content_hash, which gets a ':superseded:<id>' suffix: the unique
-- key is freed, so stating the old value again later inserts a new row and the history keeps both periods.
-- Returned: the rows written, then the rows superseded (invalid_at set). With p_write_id the write is applied
-- at most once per user (memory_private.memory_applied_writes): a replay returns the same rows as they are now.
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

comment on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) is
    'Insert or reinforce a batch of memory items in one statement (exact and near-duplicate de-duplication, replaces, slots); with p_write_id, applied at most once.';


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
           set embedding = i.embedding::extensions.halfvec(384), embedding_model = p_model, embedded_at = now()
          from jsonb_to_recordset(p_items) as i(content_hash text, content text, embedding text),
               public.user_memory m
         where m.user_id = p_user_id and m.content_hash = i.content_hash and m.kind = 'fact'
           and d.memory_id = m.id and d.user_id = p_user_id and d.content = i.content
        returning 1
    )
    select count(*)::integer from updated;
$$;


-- memory_upsert_embedded: memory_upsert_items (same arguments and result), then the vectors the items carry
-- ("embedding": [...]), in one round trip and one transaction: what the plugin calls when it writes facts
-- with an embedder configured. A vector lands only on a fact whose text it was computed from
-- (memory_set_embeddings): an item merged into a near-duplicate worded otherwise leaves that fact's vector alone.
--
-- Near-duplicates by embedding, a first pass over the items before memory_upsert_items: a fact item with a
-- vector and no stored row of its own hash gets the content_hash of the nearest current fact of the same user,
-- category, guard and model whose vector is at least p_embedding_threshold similar (cosine), other than the
-- fact it `replaces`; memory_upsert_items then applies it as a repeat of that row. Rewriting the hash reuses
-- memory_upsert_items' folding, write_id bookkeeping, `replaces` and slots unchanged, and keeps that function
-- free of vectors (it is also called without any). Order for one item: the same hash, then the nearest
-- vector (here), then trigrams (memory_upsert_items). The same rule in Python: memory_plugin/quality/semantic.py.
--
-- The nearest fact is found by memory_private.memory_near_embedded: the user's 50 nearest vectors from the
-- partition's HNSW index, each joined to its fact by primary key, filtered by category and guard. Items
-- without match keys (`remember`, verbatim notes) are never merged.
create function public.memory_upsert_embedded(
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

comment on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) is
    'memory_upsert_items plus the items'' vectors, in one round trip; a fact whose vector is close to a current fact''s (same category, guard and model) reinforces it.';

revoke all on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) from public, anon;
revoke all on function public.memory_set_embeddings(uuid, text, jsonb) from public, anon;
revoke all on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) from public, anon;
grant execute on function public.memory_upsert_items(uuid, jsonb, real, uuid, real) to authenticated, service_role;
grant execute on function public.memory_set_embeddings(uuid, text, jsonb) to authenticated, service_role;
grant execute on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) to authenticated, service_role;
