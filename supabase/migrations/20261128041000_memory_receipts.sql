-- Context receipts kept per user (supabase/schemas/50_memory_receipts.sql).

-- memory_receipts: what the agent was given on each of a user's recent turns (the context receipt: which facts
-- were injected and why, tokens per part, what the budget cut), so that any process — `memory-plugin serve`,
-- its dashboard — can show past turns, not only the process that ran the agent.
--
-- A receipt names facts by id, never by text: their text is read from user_memory when the receipt is shown,
-- so a fact deleted (forget, erase) leaves no copy of its words here. The newest 100 receipts of a user are
-- kept (a trigger deletes older ones; ~1 kB each, 100 kB a user) and the retention policy deletes older ones
-- by age (`memory-plugin maintain`, MEMORY_RETENTION_RECEIPT_DAYS).
create table memory_private.memory_receipts (
    user_id    uuid        not null,
    id         bigint      generated always as identity,
    session_id text        not null,
    -- When the context was built (the turn's start).
    created_at timestamptz not null default now(),
    -- The receipt without fact texts: {"report": {...tokens per part}, "injected": [{"id", "category",
    -- "reason", "tokens", "score", "components"}], "in_slots": [...], "cut": [...], "standing_tokens",
    -- "turn_tokens", "messages_kept", "messages_dropped", "summary_cut"}.
    receipt    jsonb       not null,
    constraint memory_receipts_pkey primary key (user_id, id),
    -- A receipt lists at most the facts of one context (a few dozen): 64 kB is room for hundreds.
    constraint memory_receipts_receipt_bound check (pg_column_size(receipt) <= 65536 and char_length(session_id) <= 500)
);

comment on table memory_private.memory_receipts is
    'The context receipts of each user''s recent turns (memory_plugin): facts injected by id with their scores, tokens per part, what was cut. The newest 100 per user are kept (trigger), older ones go by age (retention). RLS: a user reads, writes and deletes only their own rows.';

-- Retention deletes by age across users.
create index memory_receipts_created_at_idx on memory_private.memory_receipts (created_at);

alter table memory_private.memory_receipts enable row level security;

create policy memory_receipts_select_own on memory_private.memory_receipts
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_receipts_insert_own on memory_private.memory_receipts
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_receipts_delete_own on memory_private.memory_receipts
    for delete to authenticated using ((select auth.uid()) = user_id);

-- No update policy: a receipt records what happened (update is granted, as on memory_jobs, and changes no row).
revoke all on table memory_private.memory_receipts from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_receipts to authenticated;
grant all on table memory_private.memory_receipts to service_role;

-- Keep each user's newest 100 receipts: after an insert, older ones go. The user's advisory lock (taken per
-- statement, held to commit) serialises concurrent inserts of one user, and the delete runs after it with a
-- fresh snapshot, so it sees the other writer's committed rows: the bound holds exactly under concurrency.
create function memory_private.memory_receipts_keep_newest() returns trigger
    language plpgsql
    set search_path = ''
as $$
declare
    r record;
begin
    for r in select distinct a.user_id from added a order by a.user_id loop
        perform pg_advisory_xact_lock(hashtextextended('memory_plugin.receipts:' || r.user_id::text, 0));
        delete from memory_private.memory_receipts m
         where m.user_id = r.user_id
           and m.id < (select k.id from memory_private.memory_receipts k
                        where k.user_id = r.user_id order by k.id desc offset 99 limit 1);
    end loop;
    return null;
end;
$$;

create trigger memory_receipts_keep_newest after insert on memory_private.memory_receipts
    referencing new table as added for each statement
    execute function memory_private.memory_receipts_keep_newest();

revoke all on function memory_private.memory_receipts_keep_newest() from public, anon;
grant execute on function memory_private.memory_receipts_keep_newest() to authenticated, service_role;
