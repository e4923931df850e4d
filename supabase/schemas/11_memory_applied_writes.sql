-- memory_applied_writes: the write ids memory_upsert_items has applied, so a replayed write is applied once.
--
-- While the database is unreachable the plugin appends writes to a local, fsynced journal and replays them
-- when it returns (memory_plugin/outage/). A write can commit while its acknowledgement is lost (timeout,
-- connection cut, crash between the commit and the journal's truncation) and is then replayed; reinforcement
-- is not idempotent (a repeat raises confidence and relevance_count), so the database recognises a write it
-- has already applied. memory_upsert_items records the write_id here in the same transaction as the rows it
-- writes: both commit or neither does. Two concurrent calls with the same id: the second one's insert waits on
-- the first one's uncommitted key; if the first commits, the second applies nothing; if it rolls back, the
-- second applies. Either way the write is applied exactly once.
--
-- Keyed by (user_id, write_id): write ids are chosen by clients, so one user's id never claims, blocks or
-- reveals another user's write with the same id.
create table memory_private.memory_applied_writes (
    user_id    uuid        not null,
    -- Chosen by the client (a random UUID per write) before the first attempt, kept across retries.
    write_id   uuid        not null,
    item_count integer,
    -- The rows the write produced (written, then superseded): a replay returns them as they are now.
    record_ids uuid[],
    applied_at timestamptz not null default now(),
    constraint memory_applied_writes_pkey primary key (user_id, write_id)
);

comment on table memory_private.memory_applied_writes is
    'Writes already applied by memory_upsert_items (memory_plugin), per user, so a replayed write is applied once. Rows older than the longest outage the plugin must survive can be deleted.';

-- Row-level security as on user_memory. memory_upsert_items fills record_ids in after the rows are written,
-- as the user (security invoker), so a user may update their own records; the row stays theirs (with check),
-- and changing record_ids only changes what a replay of their own write returns. Deleting one's own records
-- only lets that user's own old writes apply again.
alter table memory_private.memory_applied_writes enable row level security;

create policy memory_applied_writes_select_own on memory_private.memory_applied_writes
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_applied_writes_insert_own on memory_private.memory_applied_writes
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_applied_writes_update_own on memory_private.memory_applied_writes
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_applied_writes_delete_own on memory_private.memory_applied_writes
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_applied_writes from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_applied_writes to authenticated;
grant all on table memory_private.memory_applied_writes to service_role;
