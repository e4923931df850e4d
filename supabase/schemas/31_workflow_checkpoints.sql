-- workflow_checkpoints (memory_private: machinery the REST API does not expose): a compact snapshot of a workflow's state per session (question, output, route decision,
-- entities), so a run interrupted in one worker resumes in another. Bounded: each save keeps the session's
-- newest `p_max` snapshots and deletes the rest in the same statement (unbounded checkpoint growth is the
-- storage problem such tables are known for).

create table memory_private.workflow_checkpoints (
    id          bigint generated always as identity primary key,
    user_id     uuid not null,
    session_id  text not null check (length(session_id) between 1 and 200),
    step        text not null check (length(step) between 1 and 200),
    -- A snapshot, not a transcript: 64 kB is ~50 times the budget workflow's state.
    state       jsonb not null check (jsonb_typeof(state) = 'object' and octet_length(state::text) <= 65536),
    created_at  timestamptz not null default now()
);

create index workflow_checkpoints_session_idx on memory_private.workflow_checkpoints (user_id, session_id, id desc);

alter table memory_private.workflow_checkpoints enable row level security;

create policy workflow_checkpoints_select_own on memory_private.workflow_checkpoints
    for select to authenticated using ((select auth.uid()) = user_id);
create policy workflow_checkpoints_insert_own on memory_private.workflow_checkpoints
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy workflow_checkpoints_update_own on memory_private.workflow_checkpoints
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy workflow_checkpoints_delete_own on memory_private.workflow_checkpoints
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.workflow_checkpoints from anon, authenticated;
grant select, insert, update, delete on table memory_private.workflow_checkpoints to authenticated;
grant all on table memory_private.workflow_checkpoints to service_role;
