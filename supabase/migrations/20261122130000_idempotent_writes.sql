-- Idempotent writes: a write carries a client-chosen id (`write_id`) and the database applies it once.
--
-- Why: while the database is unreachable the plugin appends writes to a local, fsynced journal and replays
-- them when it returns (memory_plugin/store/resilient.py). A write can reach the database and commit while
-- its acknowledgement is lost (timeout, connection cut, crash between the commit and the journal's
-- truncation); it is then replayed. Reinforcement is not idempotent (a repeat raises confidence and
-- relevance_count), so the database itself must recognise a write it has already applied.
--
-- memory_upsert_items (its p_write_id; the function is defined in 20261123100000_memory_quality.sql) records
-- each write_id in memory_applied_writes in the same transaction as the rows it writes: both commit or neither
-- does. A write_id already recorded is a no-op. Two concurrent calls with the same id: the second one's insert
-- waits on the first one's uncommitted key; if the first commits, the second applies nothing; if it rolls
-- back, the second applies. Either way the write is applied exactly once.

create table public.memory_applied_writes (
    -- Chosen by the client (a random UUID per write) before the first attempt, kept across retries.
    write_id   uuid primary key,
    user_id    uuid        not null,
    item_count integer,
    applied_at timestamptz not null default now()
);

comment on table public.memory_applied_writes is
    'Writes already applied by memory_upsert_items (memory_plugin), so a replayed write is applied once. Rows older than the longest outage the plugin must survive can be deleted.';

create index memory_applied_writes_user_id_idx on public.memory_applied_writes (user_id);

-- Row-level security as on user_memory: a user sees and records only their own writes. A record is
-- immutable: there is no update policy, so an update changes nothing. Update and delete are granted so that
-- a client trying them gets "no rows" (as on user_memory) rather than an error; deleting one's own records
-- is allowed (it only lets that user's own old writes apply again).
alter table public.memory_applied_writes enable row level security;

create policy memory_applied_writes_select_own on public.memory_applied_writes
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_applied_writes_insert_own on public.memory_applied_writes
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_applied_writes_delete_own on public.memory_applied_writes
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table public.memory_applied_writes from anon, authenticated;
grant select, insert, update, delete on table public.memory_applied_writes to authenticated;
grant all on table public.memory_applied_writes to service_role;
