-- Near-duplicates by embedding similarity (issue 4): a fact written with an embedding reinforces a current fact
-- of the same user and category whose vector of the same model is at least p_embedding_threshold similar
-- (cosine) and whose guard (numbers/codes, negation, named weekdays/months/colours/materials) is the same,
-- other than the fact it `replaces`, instead of adding a row. The rule and the threshold are described in
-- memory_plugin/quality/semantic.py (the same rule in Python, for the in-memory store) and the README
-- ("Keeping memory small, true and current").
--
-- Where it runs: in memory_upsert_embedded, the function the plugin calls when facts carry vectors, as a first
-- pass over the items inside the same round trip and transaction, before memory_upsert_items. Each fact item
-- with a vector and no stored row of its own hash gets the content_hash of its nearest match, which
-- memory_upsert_items then applies as a repeat of that row (confidence up by the reinforcement step, bounded
-- at 1; relevance_count + 1; last_reinforced_at; importance max; the stored wording, keys and vector kept).
-- Why not a third branch in memory_upsert_items' near-duplicate lookup: that function never sees vectors (it
-- is also called without any), and redefining its 250 lines for one branch would fork it; rewriting the hash
-- reuses its folding, write_id bookkeeping, `replaces` and slots unchanged. Order for one item: the same hash,
-- then the nearest vector (here), then trigrams (memory_upsert_items).
--
-- How the nearest fact is found: an exact scan of the user's current facts of the item's category and guard
-- (the GiST index user_memory_fact_match_idx leads with user_id, category, match_guard), each joined to its
-- vector by primary key. Not the HNSW index: it cannot filter by user, category or guard inside the graph
-- (memory_search's comment), and the candidates of one item are few (a guard with a number or a value splits
-- a user's facts finely). Items without match keys (`remember`, verbatim notes) are never merged.
drop function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text);
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
    -- As memory_upsert_items: its statements planned once per connection. Except the first pass (EXECUTE,
    -- planned at each call with the call's values): a generic plan made on a user's first write, when the
    -- tables look empty, scanned all of the user's facts per item (+17 ms a write at 1,000 facts of one guard).
    set plan_cache_mode = force_generic_plan
as $$
declare
    v_ids   uuid[];
    v_items jsonb := p_items;
    v_now   timestamptz := now();
begin
    -- A replayed write (known write_id) changes nothing: memory_upsert_items returns its rows as they are.
    if p_model is not null and p_embedding_threshold <= 1
       and (p_write_id is null
            or not exists (select from public.memory_applied_writes w where w.write_id = p_write_id)) then
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
          left join lateral (
              select m.content_hash as target
                from public.user_memory m
                join public.memory_search_docs d on d.user_id = $2 and d.memory_id = m.id
               where q.vec is not null
                 and m.user_id = $2 and m.kind = 'fact'
                 and m.invalid_at is null and m.archived_at is null
                 and (m.expires_at is null or m.expires_at > $5)
                 and m.category = e.item ->> 'category' and m.match_guard = e.item ->> 'match_guard'
                 and m.id is distinct from (e.item ->> 'replaces')::uuid
                 -- not `=`: as an index condition it made the (user_id, embedding_model) index look as good as
                 -- the primary key, and each candidate read all of the user's vectors (64 ms a write at 1,000
                 -- facts of one guard); this way each candidate's vector is one primary-key lookup.
                 and d.embedding_model is not distinct from $3
                 and 1 - (d.embedding operator(extensions.<=>) q.vec) >= $4
               order by d.embedding operator(extensions.<=>) q.vec, m.last_reinforced_at desc, m.id
               limit 1
          ) as t on true
        $sql$ into v_items using p_items, p_user_id, p_model, p_embedding_threshold, v_now;
    end if;

    select array_agg(w.id order by w.ordinality) into v_ids
      from public.memory_upsert_items(p_user_id, v_items, p_reinforcement_step, p_write_id,
                                      p_near_duplicate_threshold) with ordinality as w;
    -- As in 20261123120000_hybrid_search.sql: neighbours follow the order the items were given (memory_upsert_items
    -- inserts by content hash), re-made for the facts this write inserted (a repeat keeps its neighbours; an item
    -- merged into a near-duplicate finds no row of its own hash).
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
    -- lateral: one primary-key lookup per row (with a generic plan a join was a scan of the whole table).
    return query
        select m.* from unnest(v_ids) with ordinality as w(id, n)
         cross join lateral (select * from public.user_memory u where u.id = w.id) as m
         order by w.n;
end;
$$;

comment on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) is
    'memory_upsert_items plus the items'' vectors, in one round trip; a fact whose vector is close to a current fact''s (same category, guard and model) reinforces it.';

revoke all on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real) from public, anon;
grant execute on function public.memory_upsert_embedded(uuid, jsonb, real, uuid, real, text, real)
    to authenticated, service_role;
