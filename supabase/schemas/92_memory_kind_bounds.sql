-- Count limits on the rows the fact limit does not cover (see 15_memory_bounds.sql for the rules, the limits
-- table and the errors): preferences, projects and patterns in user_memory, and the Postgres session store's
-- sessions. The same counters (memory_usage), locked in the writing transaction, so the limit holds exactly for
-- concurrent writers; the same refusal (PT413, `MemoryLimitError`); the service path counted, never refused.
--
-- Defaults, sized from what real use stores (a user reaching one is writing in a loop, not using the plugin):
--  - preferences_per_user 10,000: a preference is one row per value (write/items.py): one per preferred material
--    plus 4 single-valued slots replaced in place. A buyer of 1,000 materials is far past any real catalogue.
--  - projects_per_user 50,000: projects are history, one row each, never merged. 20 projects a working day for
--    10 years is 50,000.
--  - patterns_per_user 10,000: one row per distinct pattern sentence (repeats reinforce it); a user has tens.
--  - sessions_per_user 100: MEMORY_MAX_SESSIONS_PER_USER; the store evicts a user's least recently active
--    session before a new one (as the service path), a direct client is refused instead.
insert into memory_private.memory_limits (name, value, description) values
    ('preferences_per_user', 10000, 'Rows of kind preference in user_memory (one per value).'),
    ('projects_per_user', 50000, 'Rows of kind project in user_memory (the project history).'),
    ('patterns_per_user', 10000, 'Rows of kind pattern in user_memory (one per distinct pattern).'),
    ('sessions_per_user', 100, 'Rows of memory_private.memory_sessions: MEMORY_MAX_SESSIONS_PER_USER.');

-- user_memory: the count of each kind, under the limit `<kind>s_per_user`, is kept by the one bounds trigger of
-- user_memory (user_memory_bounds and user_memory_charge, 90_memory_bounds.sql), with the fact count and the
-- write rate: a statement's rows are read once and the user's counters moved in one upsert.

-- A row whose kind or owner changes moves between counts: off the old one, onto the new one (refused past its
-- limit). A row trigger whose condition is false for every ordinary update (no call at all).
create function memory_private.user_memory_kind_moved() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
begin
    if old.kind <> 'fact' then
        perform memory_private.memory_usage_add(old.user_id, old.kind || 's_per_user', -1, false);
    end if;
    if new.kind <> 'fact' then
        perform memory_private.memory_usage_add(new.user_id, new.kind || 's_per_user', 1,
                                                memory_private.memory_bounds_enforced());
    end if;
    return null;
end;
$$;

create trigger user_memory_kind_moved after update of kind, user_id on public.user_memory
    for each row when (old.kind is distinct from new.kind or old.user_id is distinct from new.user_id)
    execute function memory_private.user_memory_kind_moved();

-- memory_sessions: sessions per user (anonymous sessions, owner null, are the store's alone: never counted),
-- and the size of one session. The store keeps a window of MEMORY_MAX_MESSAGES_PER_SESSION messages (20) of
-- at most MEMORY_MAX_MESSAGE_CHARS (20,000) each, 200 entity values and 50 intents; the bounds leave room for
-- a deployment that raises those settings tenfold and more.
create trigger memory_sessions_count_insert after insert on memory_private.memory_sessions
    referencing new table as added for each statement
    execute function memory_private.memory_bounds_count('sessions_per_user');
create trigger memory_sessions_count_delete after delete on memory_private.memory_sessions
    referencing old table as removed for each statement
    execute function memory_private.memory_bounds_count('sessions_per_user');
create trigger memory_sessions_keep_owner after update of user_id on memory_private.memory_sessions
    for each row when (old.user_id is distinct from new.user_id)
    execute function memory_private.memory_bounds_keep_owner();

alter table memory_private.memory_sessions
    add constraint memory_sessions_state_bound check (
        jsonb_array_length(messages) <= 10000 and pg_column_size(messages) <= 16777216
        and pg_column_size(entities) <= 1048576
        and jsonb_array_length(intents) <= 1000 and pg_column_size(intents) <= 1048576);

revoke all on function memory_private.user_memory_kind_moved() from public, anon, authenticated;
