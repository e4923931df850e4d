-- user_memory: a user's long-term memory, one row per item: a fact, a preference value, a project, a pattern.
--
-- Nothing is destroyed when a memory stops being true: a superseded or retracted fact keeps its row with
-- `invalid_at` set (and `superseded_by` naming its replacement), so history stays queryable; an expired or
-- archived one keeps its row too. Only current rows (`invalid_at` and `archived_at` null, `expires_at` null
-- or in the future) reach a prompt: the read functions filter them at read time.
--
-- The last five columns (content_hash, slot, match_key, match_guard, match_words) are internal keys the plugin
-- computes once per write (memory_plugin/quality/) and compares in SQL. They stay in this table because the
-- near-duplicate probe reads three indexes over them (user_memory_fact_words_idx, _prefix_idx, _anchor_idx):
-- an index cannot span two tables, and a side table would need kind, category and the validity columns copied
-- and kept in step. Their comments mark them internal.
create table public.user_memory (
    id                 uuid primary key default gen_random_uuid(),
    -- No foreign key to auth.users: apps may identify users outside Supabase Auth. Erasing a user's memory is
    -- an explicit operation (memory-plugin erase), not a cascade.
    user_id            uuid        not null,
    kind               text        not null check (kind in ('fact', 'preference', 'project', 'pattern')),
    -- fact: its category (memory_plugin.taxonomy); preference: the slot it fills; project and pattern: the
    -- kind again (so the column is never null and always filterable).
    category           text        not null,
    -- 20,000 characters: a verbatim note is a message someone wrote (MEMORY_MAX_NOTE_CHARS, 16,000 by default;
    -- ~2 % of everyday chat turns exceed 500 characters); extracted facts are held to MEMORY_MAX_FACT_CHARS.
    content            text        not null check (char_length(content) between 1 and 20000),
    confidence         real        not null default 0.6 check (confidence between 0 and 1),
    source             text        not null default 'inferred' check (source in ('explicit', 'inferred')),
    importance         smallint    not null default 3 check (importance between 1 and 5),
    relevance_count    integer     not null default 0 check (relevance_count >= 0),
    source_message_ids text[]      not null default '{}',
    session_id         text,
    -- Only the structured extras of projects (materials, quantity, status); empty for other kinds.
    attributes         jsonb       not null default '{}'::jsonb,
    content_hash       text        not null,
    created_at         timestamptz not null default now(),
    updated_at         timestamptz not null default now(),
    last_reinforced_at timestamptz not null default now(),
    occurred_at        timestamptz,
    expires_at         timestamptz,
    invalid_at         timestamptz,
    -- Scoped by user_id (the unique index below): a reference to another user's row is refused exactly like a
    -- reference to no row, so the foreign key cannot tell whether someone else's id exists.
    superseded_by      uuid,
    archived_at        timestamptz,
    metadata           jsonb       not null default '{}'::jsonb,
    slot               text,
    match_key          text,
    match_guard        text,
    match_words        text[],
    -- The key a sealed row's content is encrypted with (memory_plugin/crypto: 'sealed:v1:<key id>:<base64>'),
    -- read from the content itself, so the write functions need not know about sealing; null for plain rows.
    key_id             text generated always as
                           (case when content like 'sealed:v1:%' then split_part(content, ':', 3) end) stored,
    constraint user_memory_user_id_content_hash_key unique (user_id, content_hash),
    constraint user_memory_category_check check (
        (kind = 'fact' and category in ('preference', 'requirement', 'constraint', 'feedback', 'rejection',
                                        'goal', 'routine', 'contact', 'health_note', 'fact'))
        or (kind = 'preference' and category in
            ('preferred_materials', 'typical_quantities', 'communication_style', 'industry', 'location'))
        or (kind in ('project', 'pattern') and category = kind)
    )
);

-- The target of the user-scoped foreign keys (superseded_by here, memory_search_docs.memory_id).
create unique index user_memory_user_id_id_key on public.user_memory (user_id, id);

alter table public.user_memory
    add constraint user_memory_superseded_by_fkey foreign key (user_id, superseded_by)
        references public.user_memory (user_id, id) on delete set null (superseded_by);

comment on table public.user_memory is
    'Long-term conversational memory of each user (memory_plugin). One row per fact, preference value, project or request pattern. RLS: a user sees only their own rows. content_hash, slot, match_key, match_guard and match_words are internal keys.';
comment on column public.user_memory.relevance_count is 'Times the item was stated or observed again after it was first stored.';
comment on column public.user_memory.occurred_at is 'When the conversation that stated it happened (provenance); null when unknown.';
comment on column public.user_memory.expires_at is 'Temporary memories ("trip this weekend"): never shown after this time.';
comment on column public.user_memory.invalid_at is 'When it stopped being true (contradicted or retracted); the row is kept as history.';
comment on column public.user_memory.superseded_by is 'The memory that replaced this one, if any.';
comment on column public.user_memory.archived_at is 'Set by maintenance when its decayed confidence fell below the floor; kept, never shown.';
comment on column public.user_memory.metadata is 'Caller-supplied extras (e.g. a conversation turn id, a speaker).';
comment on column public.user_memory.content_hash is
    'Internal (memory_plugin): sha256 of the normalised content; unique per user, so repeats reinforce instead of duplicating.';
comment on column public.user_memory.key_id is
    'Id of the key a sealed (encrypted) row is sealed with, read from its content; null: plain text. Sealed rows have no search row, vector or near-duplicate keys.';
comment on column public.user_memory.slot is
    'Internal (memory_plugin), facts: the single-valued subject it is about (budget, lead_time, material:7075); a newer current fact of the same slot supersedes it.';
comment on column public.user_memory.match_key is
    'Internal (memory_plugin), facts: the content without case, accents or extra spaces; compared with pg_trgm similarity to find near-duplicates.';
comment on column public.user_memory.match_words is
    'Internal (memory_plugin), facts: content words cut to 5 letters; a near-duplicate adds or drops words, never swaps one ("viernes" for "lunes").';
comment on column public.user_memory.match_guard is
    'Internal (memory_plugin), facts: negation and the numbers/codes/named values in the content; near-duplicates have the same guard ("aluminio 7075" is not "aluminio 6061").';

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

-- memory_context reads preferences, projects and patterns through the first index.
create index user_memory_user_id_kind_idx on public.user_memory (user_id, kind, last_reinforced_at desc);
-- Ranked facts (memory_rank_facts): current facts other than rejections; `category` rides along so the decay
-- (a half-life per category) is computed from the index alone.
create index user_memory_fact_rank_idx on public.user_memory
    (user_id, importance, confidence desc, last_reinforced_at desc, id) include (expires_at, category)
    where kind = 'fact' and invalid_at is null and archived_at is null and category <> 'rejection';
-- The most recently reinforced facts of each importance level: the starting set of memory_rank_facts' bar.
create index user_memory_fact_recent_idx on public.user_memory
    (user_id, importance, last_reinforced_at desc, id) include (confidence, expires_at, category)
    where kind = 'fact' and invalid_at is null and archived_at is null and category <> 'rejection';
create index user_memory_rejection_idx on public.user_memory (user_id, last_reinforced_at desc, id)
    where kind = 'fact' and invalid_at is null and archived_at is null and category = 'rejection';
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
create index user_memory_fact_slot_idx on public.user_memory (user_id, slot)
    where kind = 'fact' and slot is not null and invalid_at is null and archived_at is null;
create index user_memory_superseded_by_idx on public.user_memory (superseded_by) where superseded_by is not null;
-- Dates a question names ("on 13 October 2023") are matched against occurred_at.
create index user_memory_fact_occurred_idx on public.user_memory (user_id, occurred_at) where kind = 'fact';
-- `memory-plugin rotate-key` finds the rows sealed under keys other than the active one (few, or none).
create index user_memory_key_id_idx on public.user_memory (key_id, id) where key_id is not null;

create function memory_private.user_memory_touch_updated_at() returns trigger
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
    for each row execute function memory_private.user_memory_touch_updated_at();

-- Row-level security: the database itself keeps users apart, whatever the application code does.
-- What a user connected as `authenticated` can still learn about others, and why it is accepted:
--  - table sizes: pg_class.reltuples and pg_stat_user_tables are readable by every role, and EXPLAIN's
--    estimate for `where user_id = <id>` comes from the planner's statistics, so it approximates how many
--    rows a given user id has (pg_stats itself hides tables under RLS). It needs the other user's id, a
--    random UUID the plugin never shows to other users; the statistics also drive memory_search's choice of
--    vector plan and every index choice, so they are kept.
--  - timing: every read is bounded by the caller's own user_id inside an index, except memory_search's HNSW
--    walk, which slows as other users fill the caller's partition (22_memory_search.sql): it shows how crowded
--    one's own partition is, not whose rows are there.
--  - primary keys chosen by the caller (see the grants below).
-- Closed: foreign keys are scoped by user_id (a reference to another user's row fails as one to no row),
-- write ids are per user (memory_private.memory_applied_writes), and no sequence is shared (insertion order
-- is a per-user counter, memory_private.memory_search_counts.last_seq).
alter table public.user_memory enable row level security;

create policy user_memory_select_own on public.user_memory
    for select to authenticated using ((select auth.uid()) = user_id);
create policy user_memory_insert_own on public.user_memory
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy user_memory_update_own on public.user_memory
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy user_memory_delete_own on public.user_memory
    for delete to authenticated using ((select auth.uid()) = user_id);

-- A user inserting a row with an explicit `id` learns from the primary key whether that id exists. Accepted:
-- ids are random (gen_random_uuid, 122 bits) and never shown to other users, so a probe can only confirm an
-- id one already holds. (Revoking `id` from the insert grant would close it, at the price of a column-level
-- grant that clients and the table editor report as no insert privilege on the table.)
revoke all on table public.user_memory from anon, authenticated;
grant select, insert, update, delete on table public.user_memory to authenticated;
grant all on table public.user_memory to service_role;
