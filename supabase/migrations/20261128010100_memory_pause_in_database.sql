-- The memory switch is kept by the database: writes of a paused user's facts, notes, slots, summaries and chats
-- run as `authenticated` are refused with SQLSTATE PT423 in the write's own statement. See
-- supabase/schemas/81_memory_consent.sql and 90_memory_bounds.sql.

-- The database keeps the switch: a statement run as `authenticated` (the plugin's user statements, a PostgREST
-- client) that stores something new about a paused user is refused with SQLSTATE PT423 (PostgREST answers HTTP
-- 423; the plugin raises MemoryPausedError) and writes nothing: a fact or note (user_memory, checked by its
-- bounds trigger: inserts, and changes other than retiring a row), the slots, a summary, a chat or an append to
-- one. Reading, deleting, forgetting and resuming go on. The service path (import, maintenance, erase) is not
-- refused. Checked in the write's own statement, so a write is one statement and sees a pause at once.
create function memory_private.memory_refuse_paused(p_user_id uuid)
    returns void
    language plpgsql
    set search_path = ''
as $$
begin
    -- In user_id order from the primary key (`>=`, `limit 1`): under the write functions' planner settings no
    -- other plan competes, whatever the statistics said when it was made.
    if exists (select from (select c.user_id, c.paused from memory_private.memory_consent c
                             where c.user_id >= p_user_id order by c.user_id limit 1) as c
                where c.user_id = p_user_id and c.paused) then
        raise exception using
            errcode = 'PT423',
            message = format('memory paused: user %s paused their memory; nothing new is stored until they resume it',
                             p_user_id),
            hint = 'resume it first (pause_memory(user, False), PUT /api/memory/pause {"paused": false})';
    end if;
end;
$$;

-- Statement trigger of the slots, summaries and chats: every user a statement wrote rows of.
create function memory_private.memory_pause_guard() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
declare
    r record;
begin
    if memory_private.memory_bounds_enforced() then
        for r in select distinct a.user_id from added a loop
            perform memory_private.memory_refuse_paused(r.user_id);
        end loop;
    end if;
    return null;
end;
$$;

create trigger memory_slots_pause_insert after insert on public.memory_slots
    referencing new table as added for each statement execute function memory_private.memory_pause_guard();
create trigger memory_slots_pause_update after update on public.memory_slots
    referencing new table as added for each statement execute function memory_private.memory_pause_guard();
create trigger memory_summaries_pause_insert after insert on public.memory_summaries
    referencing new table as added for each statement execute function memory_private.memory_pause_guard();
create trigger chats_pause_insert after insert on public.chats
    referencing new table as added for each statement execute function memory_private.memory_pause_guard();
create trigger chats_pause_update after update on public.chats
    referencing new table as added for each statement execute function memory_private.memory_pause_guard();

revoke all on function memory_private.memory_refuse_paused(uuid) from public, anon, authenticated;
revoke all on function memory_private.memory_pause_guard() from public, anon, authenticated;
grant execute on function memory_private.memory_refuse_paused(uuid) to service_role;

-- user_memory: the fact count (kind fact) and the write rate. Charged: rows inserted, and rows changed other
-- than by retiring them (superseding, archiving), so a reinforcement counts as a write, as in the plugin. The
-- same rows are refused for a user who paused their memory (81_memory_consent.sql): one trigger, one pass.
create or replace function memory_private.user_memory_bounds() returns trigger
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
                perform memory_private.memory_refuse_paused(r.user_id);
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
                perform memory_private.memory_refuse_paused(r.user_id);
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
