-- Bounds the database enforces (supabase/schemas/15_memory_bounds.sql and 90_memory_bounds.sql), then the
-- counts of the rows users already have.

-- Bounds the database enforces: every per-user limit the plugin promises holds for writes made directly as
-- `authenticated` too (a PostgREST client with the user's own token), not only for writes made by the plugin.
--
-- How each table is bounded (the triggers and size checks are in 90_memory_bounds.sql, after every table):
--  - counts per user (facts, chats, conversations and their entries, checkpoints, summaries): a statement trigger
--    adds the rows a statement inserted to the user's row in memory_usage and refuses the statement when the
--    count passes the limit. The counter row is updated, hence locked, in the writing transaction: concurrent
--    writers of one user queue on it and each sees the others' committed rows, so the limit holds exactly (20
--    concurrent writes of 10 facts against a limit of 100 store exactly 100). One update per statement and
--    user: the cost does not grow with what the user has stored (no count(*) over their rows).
--  - the write rate: a token bucket per user (memory_write_buckets), charged with the rows a statement inserts
--    into or changes in user_memory (superseding and archiving, which retire rows, are free).
--  - sizes (metadata, histories, documents): CHECK constraints on the tables.
--  - summary versions (3 kept per scope): a trigger deletes older versions after each insert.
-- The trigger functions are `security definer` (owned by the migrating role): the counters and buckets are
-- readable by their user but writable by no one else, so a user cannot reset their own count. A trigger function
-- cannot be called directly, only fired by a write to its table.
--
-- Limits are enforced for statements run as `authenticated` (PostgREST and the plugin's user statements);
-- statements of the service path (migrations, `memory-plugin erase`, maintenance, service_role) are counted but
-- never refused. Refusals: SQLSTATE PT413 (a count limit; PostgREST answers HTTP 413) and PT429 (the write rate;
-- HTTP 429, the seconds to wait in DETAIL as `retry_after=<seconds>`); size checks fail with 23514 on a
-- constraint named `*_bound`. The plugin maps all three to `MemoryLimitError` (database/calls.py).
--
-- Changing a limit: `update memory_private.memory_limits set value = ... where name = ... and user_id is null`
-- for everyone, or insert a row with a user_id for one user (it wins over the default). Keep the plugin's own
-- settings (MEMORY_MAX_FACTS_PER_USER, MEMORY_WRITE_RATE_PER_SECOND, MEMORY_WRITE_BURST) equal to these.

create table memory_private.memory_limits (
    name        text             not null check (name in (
                    'facts_per_user', 'write_rate_per_second', 'write_burst', 'chats_per_user',
                    'conversations_per_user', 'conversation_entries_per_user', 'checkpoints_per_user',
                    'summaries_per_user')),
    -- null: the default for every user; a user id: that user's own limit.
    user_id     uuid,
    value       double precision not null check (value >= 0),
    description text,
    constraint memory_limits_name_user_key unique nulls not distinct (name, user_id)
);

comment on table memory_private.memory_limits is
    'Per-user limits the database enforces (memory_plugin): a row without user_id is the default, a row with one overrides it for that user. Read by the bounds triggers at each write. RLS: a user sees only the rows naming them.';

insert into memory_private.memory_limits (name, value, description) values
    ('facts_per_user', 200000, 'Rows of kind fact in user_memory (current and history): MEMORY_MAX_FACTS_PER_USER.'),
    ('write_rate_per_second', 100, 'Rows of user_memory written per second once the burst is spent: MEMORY_WRITE_RATE_PER_SECOND (0: off).'),
    ('write_burst', 10000, 'Rows of user_memory written at once: MEMORY_WRITE_BURST.'),
    ('chats_per_user', 10000, 'Rows of public.chats.'),
    ('conversations_per_user', 10000, 'Rows of public.conversations.'),
    ('conversation_entries_per_user', 200000, 'Rows of public.conversation_entries (messages of all conversations).'),
    ('checkpoints_per_user', 10000, 'Rows of memory_private.workflow_checkpoints, all sessions together.'),
    ('summaries_per_user', 3000, 'Rows of public.memory_summaries, all scopes together (3 versions of 1,000 scopes).');

-- The rows each user has in each counted table (`counted` is the limit's name), kept by the bounds triggers.
create table memory_private.memory_usage (
    user_id uuid   not null,
    counted text   not null,
    n       bigint not null check (n >= 0),
    constraint memory_usage_pkey primary key (user_id, counted)
);

comment on table memory_private.memory_usage is
    'Rows of each user per counted table (memory_plugin), kept by triggers in the writing transaction; compared with memory_limits. RLS: a user sees only their own rows and can change none.';

-- The write-rate token bucket of each user: tokens left at refilled_at (refilled at the rate, up to the burst).
create table memory_private.memory_write_buckets (
    user_id     uuid             primary key,
    tokens      double precision not null,
    refilled_at timestamptz      not null
);

comment on table memory_private.memory_write_buckets is
    'Write-rate token bucket of each user (memory_plugin), charged by a trigger on user_memory. RLS: a user sees only their own row and can change none.';

alter table memory_private.memory_limits enable row level security;
alter table memory_private.memory_usage enable row level security;
alter table memory_private.memory_write_buckets enable row level security;

create policy memory_limits_select_own on memory_private.memory_limits
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_usage_select_own on memory_private.memory_usage
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_write_buckets_select_own on memory_private.memory_write_buckets
    for select to authenticated using ((select auth.uid()) = user_id);

-- Select only, plus update and delete without a policy (as on memory_jobs: a client trying them changes no row).
revoke all on table memory_private.memory_limits from anon, authenticated;
revoke all on table memory_private.memory_usage from anon, authenticated;
revoke all on table memory_private.memory_write_buckets from anon, authenticated;
grant select, update, delete on table memory_private.memory_limits to authenticated;
grant select, update, delete on table memory_private.memory_usage to authenticated;
grant select, update, delete on table memory_private.memory_write_buckets to authenticated;
grant all on table memory_private.memory_limits to service_role;
grant all on table memory_private.memory_usage to service_role;
grant all on table memory_private.memory_write_buckets to service_role;

-- Whether the running statement is refused past a limit: statements as `authenticated` are. `role` is the
-- SET ROLE of the transaction (PostgREST's and the plugin's set_config('role', 'authenticated', true)); a
-- security definer function changes the current user, not this setting.
create function memory_private.memory_bounds_enforced()
    returns boolean
    language sql
    stable
    set search_path = ''
as $$
    select coalesce(current_setting('role', true), '') = 'authenticated';
$$;

-- A user's limit: their own row, else the default row.
create function memory_private.memory_limit(p_user_id uuid, p_name text)
    returns double precision
    language sql
    stable
    set search_path = ''
as $$
    select coalesce(
        (select l.value from memory_private.memory_limits l where l.name = p_name and l.user_id = p_user_id),
        (select l.value from memory_private.memory_limits l where l.name = p_name and l.user_id is null),
        'Infinity'::double precision);
$$;

-- Add p_delta rows to the user's count of p_counted; with p_enforce, refuse (PT413) a count past the limit.
create function memory_private.memory_usage_add(p_user_id uuid, p_counted text, p_delta bigint, p_enforce boolean)
    returns bigint
    language plpgsql
    set search_path = ''
as $$
declare
    v_n     bigint;
    v_limit double precision;
begin
    insert into memory_private.memory_usage as u (user_id, counted, n)
    values (p_user_id, p_counted, greatest(p_delta, 0))
    on conflict (user_id, counted) do update set n = greatest(0, u.n + p_delta)
    returning u.n into v_n;
    if p_enforce and p_delta > 0 then
        v_limit := memory_private.memory_limit(p_user_id, p_counted);
        if v_n > v_limit then
            raise exception using
                errcode = 'PT413',
                message = format('limit reached: user %s would have %s rows counted as %s, the limit is %s; nothing was written',
                                 p_user_id, v_n, p_counted, v_limit),
                hint = 'delete some rows first (or ask the operator to raise memory_private.memory_limits)';
        end if;
    end if;
    return v_n;
end;
$$;

-- Spend p_items tokens of the user's write bucket, or refuse (PT429) with the seconds to wait.
create function memory_private.memory_write_take(p_user_id uuid, p_items bigint)
    returns void
    language plpgsql
    set search_path = ''
as $$
declare
    v_rate   double precision := memory_private.memory_limit(p_user_id, 'write_rate_per_second');
    v_burst  double precision := memory_private.memory_limit(p_user_id, 'write_burst');
    v_tokens double precision;
begin
    if v_rate <= 0 or p_items <= 0 then
        return;
    end if;
    insert into memory_private.memory_write_buckets as b (user_id, tokens, refilled_at)
    values (p_user_id, v_burst - p_items, clock_timestamp())
    on conflict (user_id) do update
        set tokens = least(v_burst, b.tokens + greatest(0, extract(epoch from clock_timestamp() - b.refilled_at)) * v_rate)
                     - p_items,
            refilled_at = greatest(b.refilled_at, clock_timestamp())
    returning b.tokens into v_tokens;
    if v_tokens < 0 then
        raise exception using
            errcode = 'PT429',
            message = format('writing too fast: user %s wrote %s rows; the limit is %s at once and %s per second',
                             p_user_id, p_items, v_burst, v_rate),
            detail = case when p_items <= v_burst then format('retry_after=%s', round((-v_tokens / v_rate)::numeric, 3))
                          else 'retry_after=' end;
    end if;
end;
$$;

revoke all on function memory_private.memory_bounds_enforced() from public, anon, authenticated;
revoke all on function memory_private.memory_limit(uuid, text) from public, anon, authenticated;
revoke all on function memory_private.memory_usage_add(uuid, text, bigint, boolean) from public, anon, authenticated;
revoke all on function memory_private.memory_write_take(uuid, bigint) from public, anon, authenticated;
grant execute on function memory_private.memory_bounds_enforced() to service_role;
grant execute on function memory_private.memory_limit(uuid, text) to service_role;
grant execute on function memory_private.memory_usage_add(uuid, text, bigint, boolean) to service_role;
grant execute on function memory_private.memory_write_take(uuid, bigint) to service_role;

-- The bounds on each table (see 15_memory_bounds.sql for the rules, the limits and the errors): size checks
-- (named `*_bound`: the plugin maps their violation to MemoryLimitError), counting triggers and the
-- user_memory write-rate trigger. Here, after every table, so that all bounds read in one place.

-- --- sizes ---------------------------------------------------------------------------------------------------------
-- user_memory: the plugin accepts 16,384 characters of metadata per write (write/notes.py); a reinforcement
-- merges the new keys into the stored ones, hence 4 times that. Provenance keeps the newest 50 message ids.
alter table public.user_memory
    add constraint user_memory_metadata_bound check (char_length(metadata::text) <= 65536),
    add constraint user_memory_attributes_bound check (char_length(attributes::text) <= 65536),
    add constraint user_memory_provenance_bound check (cardinality(source_message_ids) <= 1000),
    add constraint user_memory_session_id_bound check (char_length(session_id) <= 500),
    add constraint user_memory_keys_bound check (char_length(content_hash) <= 200 and char_length(slot) <= 500
                                                 and cardinality(match_words) <= 5000);

-- memory_slots: the plugin keeps 8 entries per field (context/slots.py) in at most 9 fields.
create function memory_private.memory_slots_bounded(p_slots jsonb)
    returns boolean
    language sql
    immutable
    set search_path = ''
as $$
    select octet_length(p_slots::text) <= 65536
       and (select count(*) from jsonb_object_keys(p_slots)) <= 16
       and not exists (select from jsonb_each(p_slots) f
                        where jsonb_typeof(f.value) <> 'array' or jsonb_array_length(f.value) > 8);
$$;

alter table public.memory_slots
    add constraint memory_slots_document_bound check (memory_private.memory_slots_bounded(slots));

alter table public.memory_summaries
    add constraint memory_summaries_scope_bound check (char_length(scope) <= 300 and char_length(language) <= 35);

-- chats: a history of 10,000 messages (a long chat is a few hundred) and 16 MB (the API takes 1 MB a request).
alter table public.chats
    add constraint chats_history_bound check (
        jsonb_array_length(full_history) <= 10000 and jsonb_array_length(assistant_history) <= 10000
        and pg_column_size(full_history) <= 16777216 and pg_column_size(assistant_history) <= 16777216
        and turn_count <= 10000),
    add constraint chats_text_bound check (
        char_length(title) <= 500 and char_length(summary_text) <= 20000 and cardinality(title_terms) <= 100);

-- conversations: one message per entry (8 MB: room for an attached document), a bounded record.
alter table public.conversation_entries
    add constraint conversation_entries_message_bound check (pg_column_size(message) <= 8388608
                                                             and char_length(parent_id) <= 200);
alter table public.conversations
    add constraint conversations_record_bound check (
        pg_column_size(usage) <= 65536 and pg_column_size(deferred_tool_requests) <= 1048576
        and cardinality(branches) <= 1000);

-- --- counts --------------------------------------------------------------------------------------------------------
-- Counting trigger of a table: tg_argv[0] is the limit's name (memory_limits.name, memory_usage.counted).
-- Statement-level with transition tables: one counter update per statement and user, whatever the rows.
create function memory_private.memory_bounds_count() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
declare
    v_enforce boolean := memory_private.memory_bounds_enforced();
    r         record;
begin
    if tg_op = 'INSERT' then
        for r in select a.user_id, count(*) as n from added a group by a.user_id order by a.user_id loop
            perform memory_private.memory_usage_add(r.user_id, tg_argv[0], r.n, v_enforce);
        end loop;
    else
        for r in select d.user_id, count(*) as n from removed d group by d.user_id order by d.user_id loop
            perform memory_private.memory_usage_add(r.user_id, tg_argv[0], -r.n, false);
        end loop;
    end if;
    return null;
end;
$$;

-- user_memory: the fact count (kind fact) and the write rate. Charged: rows inserted, and rows changed other
-- than by retiring them (superseding, archiving), so a reinforcement counts as a write, as in the plugin.
create function memory_private.user_memory_bounds() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
declare
    v_enforce boolean := memory_private.memory_bounds_enforced();
    r         record;
begin
    if tg_op = 'INSERT' then
        for r in select a.user_id, count(*) filter (where a.kind = 'fact') as facts, count(*) as items
                   from added a group by a.user_id order by a.user_id loop
            if v_enforce then
                perform memory_private.memory_write_take(r.user_id, r.items);
            end if;
            if r.facts > 0 then
                perform memory_private.memory_usage_add(r.user_id, 'facts_per_user', r.facts, v_enforce);
            end if;
        end loop;
    elsif tg_op = 'DELETE' then
        for r in select d.user_id, count(*) as facts from removed d where d.kind = 'fact'
                  group by d.user_id order by d.user_id loop
            perform memory_private.memory_usage_add(r.user_id, 'facts_per_user', -r.facts, false);
        end loop;
    else
        -- Facts gained (a row made a fact, or handed to another user by the service path) and rows written.
        for r in select coalesce(g.user_id, w.user_id) as user_id, coalesce(g.facts, 0) as facts,
                        coalesce(w.items, 0) as items
                   from (select x.user_id, sum(x.d) as facts
                           from (select a.user_id, 1 as d from added a where a.kind = 'fact'
                                 union all
                                 select d.user_id, -1 from removed d where d.kind = 'fact') x
                          group by x.user_id) g
                   full join (select a.user_id, count(*) as items
                                from added a join removed d on d.id = a.id
                               where not ((d.invalid_at is null and a.invalid_at is not null)
                                          or (d.archived_at is null and a.archived_at is not null))
                               group by a.user_id) w on w.user_id = g.user_id
                  order by 1 loop
            if v_enforce and r.items > 0 then
                perform memory_private.memory_write_take(r.user_id, r.items);
            end if;
            if r.facts <> 0 then
                perform memory_private.memory_usage_add(r.user_id, 'facts_per_user', r.facts, v_enforce);
            end if;
        end loop;
    end if;
    return null;
end;
$$;

create trigger user_memory_bounds_insert after insert on public.user_memory
    referencing new table as added for each statement execute function memory_private.user_memory_bounds();
create trigger user_memory_bounds_update after update on public.user_memory
    referencing old table as removed new table as added
    for each statement execute function memory_private.user_memory_bounds();
create trigger user_memory_bounds_delete after delete on public.user_memory
    referencing old table as removed for each statement execute function memory_private.user_memory_bounds();

create trigger chats_count_insert after insert on public.chats
    referencing new table as added for each statement
    execute function memory_private.memory_bounds_count('chats_per_user');
create trigger chats_count_delete after delete on public.chats
    referencing old table as removed for each statement
    execute function memory_private.memory_bounds_count('chats_per_user');
create trigger conversations_count_insert after insert on public.conversations
    referencing new table as added for each statement
    execute function memory_private.memory_bounds_count('conversations_per_user');
create trigger conversations_count_delete after delete on public.conversations
    referencing old table as removed for each statement
    execute function memory_private.memory_bounds_count('conversations_per_user');
create trigger conversation_entries_count_insert after insert on public.conversation_entries
    referencing new table as added for each statement
    execute function memory_private.memory_bounds_count('conversation_entries_per_user');
create trigger conversation_entries_count_delete after delete on public.conversation_entries
    referencing old table as removed for each statement
    execute function memory_private.memory_bounds_count('conversation_entries_per_user');
create trigger workflow_checkpoints_count_insert after insert on memory_private.workflow_checkpoints
    referencing new table as added for each statement
    execute function memory_private.memory_bounds_count('checkpoints_per_user');
create trigger workflow_checkpoints_count_delete after delete on memory_private.workflow_checkpoints
    referencing old table as removed for each statement
    execute function memory_private.memory_bounds_count('checkpoints_per_user');
create trigger memory_summaries_count_insert after insert on public.memory_summaries
    referencing new table as added for each statement
    execute function memory_private.memory_bounds_count('summaries_per_user');
create trigger memory_summaries_count_delete after delete on public.memory_summaries
    referencing old table as removed for each statement
    execute function memory_private.memory_bounds_count('summaries_per_user');

-- A user's id never changes on a counted row (the counts would drift): RLS already keeps a user's rows theirs;
-- this keeps the service path from moving rows between users unnoticed.
create function memory_private.memory_bounds_keep_owner() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    raise exception using errcode = '23514', message = format('%s.user_id cannot change', tg_table_name),
        constraint = tg_table_name || '_owner_bound';
end;
$$;

create trigger chats_keep_owner after update of user_id on public.chats
    for each row when (old.user_id is distinct from new.user_id)
    execute function memory_private.memory_bounds_keep_owner();
create trigger conversations_keep_owner after update of user_id on public.conversations
    for each row when (old.user_id is distinct from new.user_id)
    execute function memory_private.memory_bounds_keep_owner();
create trigger conversation_entries_keep_owner after update of user_id on public.conversation_entries
    for each row when (old.user_id is distinct from new.user_id)
    execute function memory_private.memory_bounds_keep_owner();
create trigger workflow_checkpoints_keep_owner after update of user_id on memory_private.workflow_checkpoints
    for each row when (old.user_id is distinct from new.user_id)
    execute function memory_private.memory_bounds_keep_owner();
create trigger memory_summaries_keep_owner after update of user_id on public.memory_summaries
    for each row when (old.user_id is distinct from new.user_id)
    execute function memory_private.memory_bounds_keep_owner();

-- --- summary versions ----------------------------------------------------------------------------------------------
-- The newest 3 versions of a scope are kept (context/store.py SUMMARY_VERSIONS_KEPT): an insert deletes the
-- scope's older ones, whatever version numbers a client chose. One index range of the primary key per scope
-- written. A statement trigger named after the counting one, so that it runs after the insert was counted.
create function memory_private.memory_summaries_keep_newest() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    delete from public.memory_summaries m
     using (select distinct a.user_id, a.scope from added a) w
     where m.user_id = w.user_id and m.scope = w.scope
       and m.version < (select k.version from public.memory_summaries k
                         where k.user_id = w.user_id and k.scope = w.scope
                         order by k.version desc offset 2 limit 1);
    return null;
end;
$$;

create trigger memory_summaries_keep_newest after insert on public.memory_summaries
    referencing new table as added for each statement
    execute function memory_private.memory_summaries_keep_newest();

revoke all on function memory_private.memory_slots_bounded(jsonb) from public, anon;
grant execute on function memory_private.memory_slots_bounded(jsonb) to authenticated, service_role;
revoke all on function memory_private.memory_bounds_count() from public, anon, authenticated;
revoke all on function memory_private.user_memory_bounds() from public, anon, authenticated;
revoke all on function memory_private.memory_bounds_keep_owner() from public, anon;
revoke all on function memory_private.memory_summaries_keep_newest() from public, anon;
grant execute on function memory_private.memory_bounds_keep_owner() to authenticated, service_role;
grant execute on function memory_private.memory_summaries_keep_newest() to authenticated, service_role;


-- Existing rows, counted once (the triggers keep the counts from here on).
insert into memory_private.memory_usage (user_id, counted, n)
select user_id, 'facts_per_user', count(*) from public.user_memory where kind = 'fact' group by user_id
union all select user_id, 'chats_per_user', count(*) from public.chats group by user_id
union all select user_id, 'conversations_per_user', count(*) from public.conversations group by user_id
union all select user_id, 'conversation_entries_per_user', count(*) from public.conversation_entries group by user_id
union all select user_id, 'checkpoints_per_user', count(*) from memory_private.workflow_checkpoints group by user_id
union all select user_id, 'summaries_per_user', count(*) from public.memory_summaries group by user_id;
