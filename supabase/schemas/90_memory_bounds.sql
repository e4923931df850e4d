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
-- With tg_argv[1] = 'keep_newest' a count past the limit is not refused: the user's oldest rows (lowest id) go
-- instead (workflow checkpoints: a recovery snapshot of an old session is worth less than a refused new one).
create function memory_private.memory_bounds_count() returns trigger
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

-- user_memory: one user's charge for a statement's rows, for user_memory_bounds below. As `authenticated`
-- (p_enforce) a statement that wrote rows (p_items > 0) is refused while the user's memory is paused (PT423,
-- 81_memory_consent.sql) or past their write rate (PT429: p_items tokens of their bucket), and any statement
-- past the count of a kind (PT413: `facts_per_user`, `patterns_per_user`, `preferences_per_user`,
-- `projects_per_user`, i.e. `<kind>s_per_user`); the counts move by the deltas either way (a negative delta,
-- rows that stopped being facts, only lowers a count). The user's limits and switch in one read, then a plain
-- update of the bucket and of each counter gained (an insert only for a user's first row of one). A one-fact
-- insert ran 2 trigger functions, 8 nested calls and 13 statements here (three reads of the limits, two
-- upserts); now 1, 2 and 6. The server's CPU per one-fact write moved by 1-2 % only (bench/README.md): what
-- the bounds cost, ~0.35 ms of 2.6 at load ~10, is mostly their two row updates, which enforcing them needs.
create function memory_private.user_memory_charge(
    p_user_id uuid, p_items bigint, p_facts bigint, p_patterns bigint, p_preferences bigint, p_projects bigint,
    p_enforce boolean
)
    returns void
    language plpgsql
    set search_path = ''
as $$
declare
    v_names  text[] := array['facts_per_user', 'patterns_per_user', 'preferences_per_user', 'projects_per_user'];
    v_deltas bigint[] := array[p_facts, p_patterns, p_preferences, p_projects];
    v_limits double precision[];
    v_rate   double precision;
    v_burst  double precision;
    v_paused boolean;
    v_tokens double precision;
    v_n      bigint;
begin
    if p_enforce and (p_items > 0 or greatest(p_facts, p_patterns, p_preferences, p_projects) > 0) then
        -- The user's own row of each limit, else the default row (as memory_limit), and the switch, in one read.
        select coalesce(max(l.value) filter (where l.name = 'write_rate_per_second' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'write_rate_per_second'), 'Infinity'),
               coalesce(max(l.value) filter (where l.name = 'write_burst' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'write_burst'), 'Infinity'),
               array[coalesce(max(l.value) filter (where l.name = 'facts_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'facts_per_user'), 'Infinity'),
                     coalesce(max(l.value) filter (where l.name = 'patterns_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'patterns_per_user'), 'Infinity'),
                     coalesce(max(l.value) filter (where l.name = 'preferences_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'preferences_per_user'), 'Infinity'),
                     coalesce(max(l.value) filter (where l.name = 'projects_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'projects_per_user'), 'Infinity')],
               -- fenced as in memory_refuse_paused (the primary key's order, `limit 1`)
               exists (select from (select c.user_id, c.paused from memory_private.memory_consent c
                                     where c.user_id >= p_user_id order by c.user_id limit 1) as c
                        where c.user_id = p_user_id and c.paused)
          into v_rate, v_burst, v_limits, v_paused
          from memory_private.memory_limits l
         where l.user_id = p_user_id or l.user_id is null;
        if v_paused and p_items > 0 then
            perform memory_private.memory_refuse_paused(p_user_id);  -- raises PT423
        end if;
        -- The write bucket: refilled at the rate since its last charge, up to the burst, then charged.
        if v_rate > 0 and p_items > 0 then
            update memory_private.memory_write_buckets b
               set tokens = least(v_burst, b.tokens
                                           + greatest(0, extract(epoch from clock_timestamp() - b.refilled_at))
                                             * v_rate) - p_items,
                   refilled_at = greatest(b.refilled_at, clock_timestamp())
             where b.user_id = p_user_id
            returning b.tokens into v_tokens;
            if not found then
                insert into memory_private.memory_write_buckets as b (user_id, tokens, refilled_at)
                values (p_user_id, v_burst - p_items, clock_timestamp())
                on conflict (user_id) do update
                    set tokens = least(v_burst, b.tokens
                                                + greatest(0, extract(epoch from clock_timestamp() - b.refilled_at))
                                                  * v_rate) - p_items,
                        refilled_at = greatest(b.refilled_at, clock_timestamp())
                returning b.tokens into v_tokens;
            end if;
            if v_tokens < 0 then
                raise exception using
                    errcode = 'PT429',
                    message = format('writing too fast: user %s wrote %s rows; the limit is %s at once and %s'
                                     ' per second', p_user_id, p_items, v_burst, v_rate),
                    detail = case when p_items <= v_burst
                                  then format('retry_after=%s', round((-v_tokens / v_rate)::numeric, 3))
                                  else 'retry_after=' end;
            end if;
        end if;
    end if;
    -- Each count gained, in the counters' key order (one lock order for concurrent writers of the user).
    for i in 1..4 loop
        if v_deltas[i] > 0 then
            update memory_private.memory_usage u set n = u.n + v_deltas[i]
             where u.user_id = p_user_id and u.counted = v_names[i]
            returning u.n into v_n;
            if not found then
                insert into memory_private.memory_usage as u (user_id, counted, n)
                values (p_user_id, v_names[i], v_deltas[i])
                on conflict (user_id, counted) do update set n = u.n + excluded.n
                returning u.n into v_n;
            end if;
            if p_enforce and v_n > v_limits[i] then
                raise exception using
                    errcode = 'PT413',
                    message = format('limit reached: user %s would have %s rows counted as %s, the limit is %s;'
                                     ' nothing was written', p_user_id, v_n, v_names[i], v_limits[i]),
                    hint = 'delete some rows first (or ask the operator to raise memory_private.memory_limits)';
            end if;
        elsif v_deltas[i] < 0 then
            perform memory_private.memory_usage_add(p_user_id, v_names[i], v_deltas[i], false);
        end if;
    end loop;
end;
$$;

-- user_memory: every per-user bound of its rows in one statement trigger, one pass over the statement's rows per
-- user (user_memory_charge): the count of each kind, the write rate and the memory switch. Charged to the write
-- rate: rows inserted, and rows changed other than by retiring them (superseding, archiving), so a
-- reinforcement counts as a write, as in the plugin. A row whose kind changes moves between the counts of its
-- kinds by user_memory_kind_moved (92_memory_kind_bounds.sql); an update here counts only facts gained or lost.
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
        for r in select a.user_id, count(*) as items, count(*) filter (where a.kind = 'fact') as facts,
                        count(*) filter (where a.kind = 'pattern') as patterns,
                        count(*) filter (where a.kind = 'preference') as preferences,
                        count(*) filter (where a.kind = 'project') as projects
                   from added a group by a.user_id order by a.user_id loop
            perform memory_private.user_memory_charge(r.user_id, r.items, r.facts, r.patterns, r.preferences,
                                                      r.projects, v_enforce);
        end loop;
    elsif tg_op = 'DELETE' then
        for r in select d.user_id, d.kind || 's_per_user' as counted, count(*) as n from removed d
                  group by d.user_id, d.kind order by d.user_id, d.kind loop
            perform memory_private.memory_usage_add(r.user_id, r.counted, -r.n, false);
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
            perform memory_private.user_memory_charge(r.user_id, r.items, r.facts, 0, 0, 0, v_enforce);
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
    execute function memory_private.memory_bounds_count('checkpoints_per_user', 'keep_newest');
-- The user's oldest checkpoints, when the count passes the limit.
create index workflow_checkpoints_user_idx on memory_private.workflow_checkpoints (user_id, id);
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
revoke all on function memory_private.user_memory_charge(uuid, bigint, bigint, bigint, bigint, bigint, boolean)
    from public, anon, authenticated;
grant execute on function memory_private.user_memory_charge(uuid, bigint, bigint, bigint, bigint, bigint, boolean)
    to service_role;
revoke all on function memory_private.memory_bounds_keep_owner() from public, anon;
revoke all on function memory_private.memory_summaries_keep_newest() from public, anon;
grant execute on function memory_private.memory_bounds_keep_owner() to authenticated, service_role;
grant execute on function memory_private.memory_summaries_keep_newest() to authenticated, service_role;

