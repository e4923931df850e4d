-- The near-duplicate probe finds its candidates by the new fact's content words instead of its trigrams: a GIN
-- index of (user, category, guard, word) keys and a btree of each fact's first word replace the trigram GiST,
-- whose probe read more pages the more facts a user held (bench/README.md, "The near-duplicate probe").
-- See supabase/schemas/10_user_memory.sql and 20_memory_write.sql.

-- The near-duplicate index keys (see user_memory_fact_words_idx below): 64-bit hashes of a user, category,
-- guard and one content word (the empty word stands for a fact without content words). A collision only adds
-- a candidate, which the probe's own comparisons reject.
create function memory_private.memory_fact_word_keys(p_user_id uuid, p_category text, p_guard text, p_words text[])
    returns bigint[]
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select array(select pg_catalog.hashtextextended(concat_ws(chr(31), p_user_id, p_category, p_guard, w), 0)
                   from unnest(p_words) as w)
$$;

-- The key of a fact's first content word (match_words is sorted), or of the empty word if it has none.
create function memory_private.memory_fact_anchor(p_user_id uuid, p_category text, p_guard text, p_words text[])
    returns bigint
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select pg_catalog.hashtextextended(concat_ws(chr(31), p_user_id, p_category, p_guard, coalesce(p_words[1], '')), 0)
$$;

-- The key of a fact's first three content words (fewer: the empty word stands for the missing ones).
create function memory_private.memory_fact_prefix(p_user_id uuid, p_category text, p_guard text, p_words text[])
    returns bigint
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select pg_catalog.hashtextextended(concat_ws(chr(31), p_user_id, p_category, p_guard, coalesce(p_words[1], ''),
                                                 coalesce(p_words[2], ''), coalesce(p_words[3], '')), 0)
$$;

-- memory_fact_prefix of every fact whose words are all among p_words (sorted as match_words is): the key of each
-- three, two, one or none of p_words taken in their order, C(n + 3, 3) keys for n words.
create function memory_private.memory_fact_prefixes(p_user_id uuid, p_category text, p_guard text, p_words text[])
    returns bigint[]
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    with w as (select u.w, u.i from unnest(p_words || '{"", "", ""}'::text[]) with ordinality as u(w, i))
    select array(select distinct pg_catalog.hashtextextended(concat_ws(chr(31), p_user_id, p_category, p_guard,
                                                                       a.w, b.w, c.w), 0)
                   from w as a join w as b on b.i > a.i join w as c on c.i > b.i)
$$;

revoke all on function memory_private.memory_fact_word_keys(uuid, text, text, text[]) from public, anon;
revoke all on function memory_private.memory_fact_anchor(uuid, text, text, text[]) from public, anon;
revoke all on function memory_private.memory_fact_prefix(uuid, text, text, text[]) from public, anon;
revoke all on function memory_private.memory_fact_prefixes(uuid, text, text, text[]) from public, anon;
-- Index expressions run with the writer's privileges.
grant execute on function memory_private.memory_fact_word_keys(uuid, text, text, text[]) to authenticated, service_role;
grant execute on function memory_private.memory_fact_anchor(uuid, text, text, text[]) to authenticated, service_role;
grant execute on function memory_private.memory_fact_prefix(uuid, text, text, text[]) to authenticated, service_role;
grant execute on function memory_private.memory_fact_prefixes(uuid, text, text, text[]) to authenticated, service_role;

-- Near-duplicates (memory_private.memory_near_duplicate): two facts are near-duplicates only if one's content
-- words (match_words, sorted) are all among the other's, so the candidates of a new fact A are found by its
-- words, not by its trigrams: the stored facts whose words include all of A's (the GIN), and those with fewer
-- words, all among A's, whose first three words are therefore three of A's in order (the prefix btree: the
-- keys of all C(n + 3, 3) such prefixes of A's n words are looked up; past 10 words, too many, the first word
-- alone, the anchor btree). Every key hashes (user, category, guard, words), so an entry holds one user's facts
-- of one category and guard, and a probe reads what shares A's words, not the user's whole memory: on the
-- benchmark's facts (one category, a 72-word vocabulary) ~25 index pages a probe at 100 to 10,000 facts of one
-- user, ~45 at 50,000. The trigram GiST over (user_id, category, match_guard, match_key) this replaces read
-- 15-160 pages at 100-10,000 facts and 285-350 at 50,000: its inner pages hold the union of many facts'
-- trigrams, which on a small vocabulary covers any new fact's, so it pruned little. Not partial (other kinds
-- index a null): a partial predicate the probe implies would make a whole-index scan of it a plan too. The GIN
-- without fastupdate: its pending list would be read in full by every probe.
create index user_memory_fact_words_idx on public.user_memory
    using gin (memory_private.memory_fact_word_keys(user_id, category, match_guard, match_words || ''::text))
    with (fastupdate = off);
create index user_memory_fact_anchor_idx on public.user_memory
    (memory_private.memory_fact_anchor(user_id, category, match_guard, match_words), cardinality(match_words));
create index user_memory_fact_prefix_idx on public.user_memory
    (memory_private.memory_fact_prefix(user_id, category, match_guard, match_words), cardinality(match_words));

drop index if exists public.user_memory_fact_match_idx;

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
create or replace function memory_private.memory_near_duplicate(
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
