-- chat_append_keys: the idempotency keys of recent appends to a chat, so a client that retries an append
-- (after a timeout, a 503, a dropped connection) stores its turns once. `full_history` is never rewritten, so
-- the only safe place to recognise a retry is the database, in the same transaction as the append: the key row
-- and the turns commit together or not at all.
--
-- Keyed by (user_id, chat_id, idempotency_key): keys are chosen by clients, so one user's key never claims,
-- blocks or reveals another user's append. No foreign key to chats: a key naming another user's chat must not
-- tell whether that chat exists; `PostgresChatStore.delete` removes a chat's keys with the chat, and an erase
-- removes every row of the user. Bounded: an append keeps its chat's newest `100` keys (a retry comes within
-- seconds; 100 appends later it is not a retry).
create table memory_private.chat_append_keys (
    user_id          uuid        not null,
    chat_id          uuid        not null,
    idempotency_key  text        not null check (length(idempotency_key) between 1 and 255),
    -- A hash of the request the key was first used with: the same key with another body is refused.
    request_hash     text        not null check (length(request_hash) between 1 and 128),
    turns            integer     not null,
    created_at       timestamptz not null default now(),
    constraint chat_append_keys_pkey primary key (user_id, chat_id, idempotency_key)
);

comment on table memory_private.chat_append_keys is
    'Idempotency keys of the newest appends to each chat (memory_plugin), so a retried append stores its turns once.';

alter table memory_private.chat_append_keys enable row level security;

create policy chat_append_keys_select_own on memory_private.chat_append_keys
    for select to authenticated using ((select auth.uid()) = user_id);
create policy chat_append_keys_insert_own on memory_private.chat_append_keys
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy chat_append_keys_update_own on memory_private.chat_append_keys
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy chat_append_keys_delete_own on memory_private.chat_append_keys
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.chat_append_keys from anon, authenticated;
grant select, insert, update, delete on table memory_private.chat_append_keys to authenticated;
grant all on table memory_private.chat_append_keys to service_role;

-- chat_append: append `p_turns` to both histories of the user's chat, at most once per idempotency key.
-- Returns no row when the user has no such chat; else one row whose `outcome` is 'appended'; 'replayed' when
-- the key was used before with the same request hash (`p_request_hash`, default the turns' md5): nothing is
-- appended and the chat is returned as it is now; or 'conflict' when the key was used with another request:
-- nothing is appended. Without a key every call appends. Security invoker: RLS keeps every other user's chat
-- and keys out, whatever `p_user_id` says.
create function public.chat_append(
    p_user_id         uuid,
    p_chat_id         uuid,
    p_turns           jsonb,
    p_idempotency_key text default null,
    p_request_hash    text default null
)
returns table (outcome text, chat public.chats)
language plpgsql
volatile
set search_path = ''
as $$
declare
    v_hash text := coalesce(p_request_hash, md5(p_turns::text));
    v_seen text;
    v_chat public.chats;
begin
    if p_idempotency_key is not null then
        -- The chat's row lock first: a concurrent append with the same key waits here, and the lookup below
        -- (a new snapshot) then sees the key the first one committed.
        perform 1 from public.chats c where c.user_id = p_user_id and c.id = p_chat_id for update;
        if not found then
            return;
        end if;
        select k.request_hash into v_seen
          from memory_private.chat_append_keys k
         where k.user_id = p_user_id and k.chat_id = p_chat_id and k.idempotency_key = p_idempotency_key;
        if found then
            select c.* into v_chat from public.chats c where c.user_id = p_user_id and c.id = p_chat_id;
            return query select (case when v_seen = v_hash then 'replayed' else 'conflict' end), v_chat;
            return;
        end if;
        insert into memory_private.chat_append_keys (user_id, chat_id, idempotency_key, request_hash, turns)
        values (p_user_id, p_chat_id, p_idempotency_key, v_hash, jsonb_array_length(p_turns));
        -- Keep the chat's newest 100 keys: the scan stays within the chat's 101 rows of the primary key.
        delete from memory_private.chat_append_keys k
         where k.user_id = p_user_id and k.chat_id = p_chat_id
           and k.idempotency_key in (
               select o.idempotency_key from memory_private.chat_append_keys o
                where o.user_id = p_user_id and o.chat_id = p_chat_id
                order by o.created_at desc, o.idempotency_key desc
               offset 100);
    end if;
    -- One UPDATE: the row lock it takes serialises concurrent appends, each seeing the other's turns.
    update public.chats c
       set full_history = c.full_history || p_turns,
           assistant_history = c.assistant_history || p_turns,
           turn_count = c.turn_count + jsonb_array_length(p_turns),
           last_activity_at = now()
     where c.user_id = p_user_id and c.id = p_chat_id
    returning c.* into v_chat;
    if found then
        return query select 'appended'::text, v_chat;
    end if;
end
$$;

revoke all on function public.chat_append(uuid, uuid, jsonb, text, text) from public, anon;
grant execute on function public.chat_append(uuid, uuid, jsonb, text, text) to authenticated, service_role;
