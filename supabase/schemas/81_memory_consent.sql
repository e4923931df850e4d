-- memory_consent: the user's memory switch. While `paused`, the plugin stores nothing new about the user (facts,
-- notes, extraction; reads go on). One row per user who ever used the switch; no row means memory is on. In the
-- database, so every process of the application sees the same switch at its next write.

create table memory_private.memory_consent (
    user_id    uuid        primary key,
    paused     boolean     not null default false,
    updated_at timestamptz not null default now()
);

comment on table memory_private.memory_consent is
    'The memory switch of each user (memory_plugin): while paused, nothing new is stored about them. RLS: a user sees and sets only their own row.';

alter table memory_private.memory_consent enable row level security;

create policy memory_consent_select_own on memory_private.memory_consent
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_consent_insert_own on memory_private.memory_consent
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_consent_update_own on memory_private.memory_consent
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_consent_delete_own on memory_private.memory_consent
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_consent from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_consent to authenticated;
grant all on table memory_private.memory_consent to service_role;

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
