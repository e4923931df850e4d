-- Count limits on preferences, projects and patterns (user_memory) and on the Postgres session store's
-- sessions, and a size bound on one session (supabase/schemas/92_memory_kind_bounds.sql); the counting trigger
-- skips anonymous sessions (90_memory_bounds.sql). Existing rows are counted at the end, with the triggers in
-- place and the tables locked by their creation, so no write slips between.

alter table memory_private.memory_limits
    drop constraint memory_limits_name_check,
    add constraint memory_limits_name_check check (name in (
                    'facts_per_user', 'write_rate_per_second', 'write_burst', 'chats_per_user',
                    'conversations_per_user', 'conversation_entries_per_user', 'checkpoints_per_user',
                    'summaries_per_user', 'preferences_per_user', 'projects_per_user', 'patterns_per_user',
                    'sessions_per_user'));

create or replace function memory_private.memory_bounds_count() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
declare
    v_enforce boolean := memory_private.memory_bounds_enforced();
    v_prune   boolean := coalesce(tg_argv[1], '') = 'keep_newest';
    v_n       bigint;
    v_limit   double precision;
    r         record;
begin
    if tg_op = 'INSERT' then
        for r in select a.user_id, count(*) as n from added a where a.user_id is not null  -- anonymous sessions
                  group by a.user_id order by a.user_id loop
            v_n := memory_private.memory_usage_add(r.user_id, tg_argv[0], r.n, v_enforce and not v_prune);
            v_limit := memory_private.memory_limit(r.user_id, tg_argv[0]);
            if v_prune and v_n > v_limit then
                execute format('delete from %I.%I t where t.user_id = $1 and t.id in (select o.id from %I.%I o'
                               ' where o.user_id = $1 order by o.id limit $2)',
                               tg_table_schema, tg_table_name, tg_table_schema, tg_table_name)
                    using r.user_id, (v_n - v_limit)::bigint;
            end if;
        end loop;
    else
        for r in select d.user_id, count(*) as n from removed d group by d.user_id order by d.user_id loop
            perform memory_private.memory_usage_add(r.user_id, tg_argv[0], -r.n, false);
        end loop;
    end if;
    return null;
end;
$$;

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

-- user_memory: the count of each kind other than fact, under the limit `<kind>s_per_user`. A statement trigger
-- beside user_memory_bounds (which counts facts and charges the write rate): it reads the statement's rows once
-- and touches a counter only when the statement wrote such a row, so a write of facts updates no counter here.
create function memory_private.user_memory_kind_bounds() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
declare
    v_enforce boolean := memory_private.memory_bounds_enforced();
    r         record;
begin
    if tg_op = 'INSERT' then
        for r in select a.user_id, a.kind, count(*) as n from added a where a.kind <> 'fact'
                  group by a.user_id, a.kind order by a.user_id, a.kind loop
            perform memory_private.memory_usage_add(r.user_id, r.kind || 's_per_user', r.n, v_enforce);
        end loop;
    else
        for r in select d.user_id, d.kind, count(*) as n from removed d where d.kind <> 'fact'
                  group by d.user_id, d.kind order by d.user_id, d.kind loop
            perform memory_private.memory_usage_add(r.user_id, r.kind || 's_per_user', -r.n, false);
        end loop;
    end if;
    return null;
end;
$$;

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

create trigger user_memory_kind_bounds_insert after insert on public.user_memory
    referencing new table as added for each statement execute function memory_private.user_memory_kind_bounds();
create trigger user_memory_kind_bounds_delete after delete on public.user_memory
    referencing old table as removed for each statement execute function memory_private.user_memory_kind_bounds();
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

revoke all on function memory_private.user_memory_kind_bounds() from public, anon, authenticated;
revoke all on function memory_private.user_memory_kind_moved() from public, anon, authenticated;

insert into memory_private.memory_usage (user_id, counted, n)
select user_id, kind || 's_per_user', count(*) from public.user_memory where kind <> 'fact' group by user_id, kind
union all
select user_id, 'sessions_per_user', count(*) from memory_private.memory_sessions where user_id is not null
 group by user_id;
