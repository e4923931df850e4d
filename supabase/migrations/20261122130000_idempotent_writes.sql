-- Idempotent writes: a write carries a client-chosen id (`write_id`) and the database applies it once.
--
-- Why: while the database is unreachable the plugin appends writes to a local, fsynced journal and replays
-- them when it returns (memory_plugin/store/resilient.py). A write can reach the database and commit while
-- its acknowledgement is lost (timeout, connection cut, crash between the commit and the journal's
-- truncation); it is then replayed. Reinforcement is not idempotent (a repeat raises confidence and
-- relevance_count), so the database itself must recognise a write it has already applied.
--
-- memory_upsert_items records each write_id in memory_applied_writes in the same transaction as the rows it
-- writes: both commit or neither does. A write_id already recorded is a no-op.

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


-- memory_upsert_items gains a trailing p_write_id. The old 3-argument version is dropped rather than
-- overloaded: with the new parameter defaulted, both would match a 3-argument call ("function is not
-- unique"). Calls without p_write_id behave exactly as before.
drop function public.memory_upsert_items(uuid, jsonb, real);

-- memory_upsert_items: write many items in one statement (one round trip).
-- p_items is a JSON array of objects with the columns below. A repeat of a stored item (same
-- content_hash) reinforces it: confidence rises by p_reinforcement_step (bounded by 1), relevance_count
-- and last_reinforced_at update, importance keeps the max. A single-valued preference slot whose value
-- changed takes the new value and starts over. `security invoker`: RLS applies to the caller.
--
-- p_write_id (optional): the write's idempotency key.
--  - First time: the id is recorded in memory_applied_writes and the items are applied, in one transaction.
--  - Already recorded: nothing changes, and the function returns the items' current rows (what the first
--    application left, plus anything written since), so a replay returns the same shape as a first write.
--  - Two concurrent calls with the same id: the second one's insert waits on the first one's uncommitted
--    key; if the first commits, the second finds the key taken and applies nothing; if it rolls back, the
--    second applies. Either way the write is applied exactly once.
-- A write_id recorded by another user also makes the call a no-op (RLS hides that user's rows, so nothing
-- of theirs is returned); write ids are random UUIDs, so this only happens if one is deliberately reused.
create function public.memory_upsert_items(
    p_user_id uuid,
    p_items jsonb,
    p_reinforcement_step real default 0.1,
    p_write_id uuid default null
)
    returns setof public.user_memory
    language plpgsql
    security invoker
    set search_path = ''
as $$
begin
    if p_write_id is not null then
        insert into public.memory_applied_writes (write_id, user_id, item_count)
        values (p_write_id, p_user_id, jsonb_array_length(p_items))
        on conflict (write_id) do nothing;
        if not found then
            return query
                select m.* from public.user_memory m
                 where m.user_id = p_user_id
                   and m.content_hash in (select i ->> 'content_hash' from jsonb_array_elements(p_items) as i);
            return;
        end if;
    end if;

    return query
    insert into public.user_memory as m (
        user_id, kind, category, content, confidence, source, importance,
        source_message_ids, session_id, attributes, content_hash, created_at, last_reinforced_at
    )
    select p_user_id, i.kind, i.category, i.content, i.confidence, i.source, i.importance,
           coalesce(i.source_message_ids, '{}'), i.session_id, coalesce(i.attributes, '{}'::jsonb), i.content_hash,
           coalesce(i.occurred_at, now()), coalesce(i.occurred_at, now())
    from jsonb_to_recordset(p_items) as i(
        kind text, category text, content text, confidence real, source text, importance smallint,
        source_message_ids text[], session_id text, attributes jsonb, content_hash text, occurred_at timestamptz
    )
    on conflict (user_id, content_hash) do update set
        -- Same hash means the same item, however it is spelt, so the first wording stays; only a
        -- single-valued preference slot (hashed by slot) can change value, and then it starts over.
        content            = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                  then excluded.content else m.content end,
        confidence         = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                       and lower(m.content) <> lower(excluded.content)
                                  then excluded.confidence
                                  else least(1.0, greatest(m.confidence, excluded.confidence) + p_reinforcement_step) end,
        relevance_count    = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                       and lower(m.content) <> lower(excluded.content)
                                  then 0 else m.relevance_count + 1 end,
        importance         = case when m.kind = 'preference' and m.category <> 'preferred_materials'
                                       and lower(m.content) <> lower(excluded.content)
                                  then excluded.importance else greatest(m.importance, excluded.importance) end,
        source             = case when m.source = 'explicit' or excluded.source = 'explicit'
                                  then 'explicit' else 'inferred' end,
        -- Provenance accumulates (bounded, newest kept) so a reinforced fact still says where it came from.
        source_message_ids = (select ids[greatest(1, cardinality(ids) - 49):]
                              from (select m.source_message_ids || array(
                                        select x from unnest(excluded.source_message_ids) as x
                                        where not x = any(m.source_message_ids)) as ids) as merged),
        session_id         = coalesce(excluded.session_id, m.session_id),
        attributes         = m.attributes || excluded.attributes,
        last_reinforced_at = greatest(m.last_reinforced_at, excluded.last_reinforced_at)
    returning m.*;
end;
$$;

comment on function public.memory_upsert_items(uuid, jsonb, real, uuid) is
    'Insert or reinforce a batch of memory items in one statement; with p_write_id, applied at most once.';

revoke all on function public.memory_upsert_items(uuid, jsonb, real, uuid) from public, anon;
grant execute on function public.memory_upsert_items(uuid, jsonb, real, uuid) to authenticated, service_role;
