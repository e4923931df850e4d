-- memory_turn_keys: the idempotency keys of recent memory turn finishes (`POST /api/memory/turns` with an
-- `Idempotency-Key`), so a retry that reaches another API worker, or the same one after a restart, records the
-- exchange once.
--
-- A finish records the exchange in the session store, extracts or queues facts and patches the slots: several
-- statements and maybe a model call, so the key cannot commit in the same transaction as the work (as
-- chat_create's does). Instead a finish claims its key first (state 'running', a fresh `claim_id`), runs, then
-- either stores its answer (state 'done', `outcome`: what a retry with the same body gets) or deletes the claim
-- (it failed or recorded nothing: its retry runs). While a claim runs its owner renews `claimed_at`; a claim not
-- renewed for the lease (the owner crashed) is taken over by the next attempt, and the old owner's late answer,
-- naming the old `claim_id`, changes nothing.
--
-- Transient operational data, not user data: it holds the ids of the facts a finish stored (already in
-- user_memory), so it is left out of the user export (memory_plugin/export/format.py TRANSIENT_TABLES). A key
-- lives 24 hours (a retry comes within seconds): each claim deletes the user's older keys, and the retention
-- sweep every user's. Erasing a user deletes their keys (every table with a user_id).
create table memory_private.memory_turn_keys (
    user_id      uuid        not null,
    -- Chosen by the client (e.g. a UUID per turn), sent again with every retry.
    key          text        not null,
    -- The request's hash (memory_plugin.chats.idempotency.request_hash): the same key with another body is refused.
    request_hash text        not null,
    state        text        not null default 'running',
    claim_id     uuid        not null default gen_random_uuid(),
    -- The answer of a finished turn (the API's TurnOut as JSON); null while it runs.
    outcome      jsonb,
    claimed_at   timestamptz not null default now(),
    created_at   timestamptz not null default now(),
    constraint memory_turn_keys_pkey primary key (user_id, key),
    constraint memory_turn_keys_key_length check (char_length(key) between 1 and 255),
    constraint memory_turn_keys_hash_length check (char_length(request_hash) between 1 and 128),
    constraint memory_turn_keys_state check (state in ('running', 'done')),
    constraint memory_turn_keys_outcome check ((state = 'done') = (outcome is not null)),
    constraint memory_turn_keys_outcome_size check (outcome is null or pg_column_size(outcome) <= 65536)
);

comment on table memory_private.memory_turn_keys is
    'Idempotency keys of recent memory turn finishes (memory_plugin API), per user: transient operational data (not exported), kept 24 hours.';

alter table memory_private.memory_turn_keys enable row level security;

create policy memory_turn_keys_select_own on memory_private.memory_turn_keys
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_turn_keys_insert_own on memory_private.memory_turn_keys
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_turn_keys_update_own on memory_private.memory_turn_keys
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_turn_keys_delete_own on memory_private.memory_turn_keys
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_turn_keys from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_turn_keys to authenticated;
grant all on table memory_private.memory_turn_keys to service_role;

-- memory_turn_key_claim: claim `p_key` for a finish of `p_user_id`. One row: ('claimed', claim_id, null) when
-- this attempt runs the finish (a new key, or a claim not renewed for `p_lease_seconds`: its owner is gone);
-- ('done', null, outcome) for a finished key with the same hash (the retry answers it); ('running', null, null)
-- while another attempt runs it (the caller answers 409: retry later); ('conflict', null, null) for a key used
-- with another request hash. Deletes the user's keys older than 24 hours first. Security invoker: RLS refuses a
-- key for any user but the caller, whatever `p_user_id` says.
create function public.memory_turn_key_claim(
    p_user_id       uuid,
    p_key           text,
    p_request_hash  text,
    p_lease_seconds real default 30
)
returns table (state text, claim_id uuid, outcome jsonb)
language plpgsql
volatile
set search_path = ''
as $$
declare
    v_row memory_private.memory_turn_keys;
begin
    delete from memory_private.memory_turn_keys k
     where k.user_id = p_user_id and k.created_at < now() - interval '24 hours';
    insert into memory_private.memory_turn_keys as k (user_id, key, request_hash)
    values (p_user_id, p_key, p_request_hash)
    on conflict on constraint memory_turn_keys_pkey do nothing
    returning k.* into v_row;
    if found then
        return query select 'claimed'::text, v_row.claim_id, null::jsonb;
        return;
    end if;
    -- The key exists (committed, or by a concurrent claim this insert waited for): a new snapshot sees it.
    select k.* into v_row from memory_private.memory_turn_keys k
     where k.user_id = p_user_id and k.key = p_key for update;
    if not found then
        return;  -- deleted meanwhile by its failed owner: the caller retries the claim
    end if;
    if v_row.request_hash <> p_request_hash then
        return query select 'conflict'::text, null::uuid, null::jsonb;
    elsif v_row.state = 'done' then
        return query select 'done'::text, null::uuid, v_row.outcome;
    elsif v_row.claimed_at < now() - make_interval(secs => p_lease_seconds) then
        update memory_private.memory_turn_keys k set claim_id = gen_random_uuid(), claimed_at = now()
         where k.user_id = p_user_id and k.key = p_key
        returning k.* into v_row;
        return query select 'claimed'::text, v_row.claim_id, null::jsonb;
    else
        return query select 'running'::text, null::uuid, null::jsonb;
    end if;
end
$$;

revoke all on function public.memory_turn_key_claim(uuid, text, text, real) from public, anon;
grant execute on function public.memory_turn_key_claim(uuid, text, text, real) to authenticated, service_role;
