-- Bounds the database enforces: every per-user limit the plugin promises holds for writes made directly as
-- `authenticated` too (a PostgREST client with the user's own token), not only for writes made by the plugin.
--
-- How each table is bounded (the triggers and size checks are in 90_memory_bounds.sql, after every table):
--  - counts per user (facts, chats, conversations and their entries, checkpoints, summaries): a statement trigger
--    adds the rows a statement inserted to the user's row in memory_usage and refuses the statement when the count
--    passes the limit (checkpoints: the user's oldest go instead). The counter row is updated, hence locked, in the
--    writing transaction: concurrent writers of one user queue on it and each sees the others' committed rows, so the
--    limit holds exactly (20 concurrent writes of 10 facts against a limit of 100 store exactly 100). One update per
--    statement and user: the cost does not grow with what the user has stored (no count(*) over their rows).
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
                    'summaries_per_user', 'preferences_per_user', 'projects_per_user', 'patterns_per_user',
                    'sessions_per_user')),
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
-- preferences, projects, patterns and sessions: their defaults and triggers are in 92_memory_kind_bounds.sql.

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
-- A removal only lowers an existing count: it never creates a row (erasing a user deletes their counts, then
-- their rows, whose deletion must not leave a count behind).
create function memory_private.memory_usage_add(p_user_id uuid, p_counted text, p_delta bigint, p_enforce boolean)
    returns bigint
    language plpgsql
    set search_path = ''
as $$
declare
    v_n     bigint;
    v_limit double precision;
begin
    if p_delta <= 0 then
        update memory_private.memory_usage u set n = greatest(0, u.n + p_delta)
         where u.user_id = p_user_id and u.counted = p_counted
        returning u.n into v_n;
        return coalesce(v_n, 0);
    end if;
    insert into memory_private.memory_usage as u (user_id, counted, n)
    values (p_user_id, p_counted, p_delta)
    on conflict (user_id, counted) do update set n = u.n + p_delta
    returning u.n into v_n;
    if p_enforce then
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

revoke all on function memory_private.memory_bounds_enforced() from public, anon, authenticated;
revoke all on function memory_private.memory_limit(uuid, text) from public, anon, authenticated;
revoke all on function memory_private.memory_usage_add(uuid, text, bigint, boolean) from public, anon, authenticated;
grant execute on function memory_private.memory_bounds_enforced() to service_role;
grant execute on function memory_private.memory_limit(uuid, text) to service_role;
grant execute on function memory_private.memory_usage_add(uuid, text, bigint, boolean) to service_role;
