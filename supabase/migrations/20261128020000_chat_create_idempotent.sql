-- POST /api/chats with an Idempotency-Key: the key is kept on the chat it created (see supabase/schemas/30_chats.sql
-- and 35_chat_create.sql, the current definitions).
alter table public.chats
    add column create_key text check (length(create_key) between 1 and 255),
    add column create_hash text check (length(create_hash) between 1 and 128);

-- One chat per creating key and user (a key names one user's request: another user's same key is another chat).
create unique index chats_create_key_idx on public.chats (user_id, create_key) where create_key is not null;

create function public.chat_create(
    p_user_id         uuid,
    p_title           text,
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
    v_chat public.chats;
begin
    insert into public.chats as c
           (user_id, title, title_is_user, full_history, assistant_history, turn_count, create_key, create_hash)
    values (p_user_id, p_title, p_title is not null, p_turns, p_turns, jsonb_array_length(p_turns),
            p_idempotency_key, case when p_idempotency_key is not null then v_hash end)
    on conflict (user_id, create_key) where create_key is not null do nothing
    returning c.* into v_chat;
    if found then
        return query select 'created'::text, v_chat;
        return;
    end if;
    -- The key's chat exists (committed before this statement, or by a concurrent create this insert waited
    -- for): a new snapshot sees it.
    select c.* into v_chat from public.chats c where c.user_id = p_user_id and c.create_key = p_idempotency_key;
    if found then
        return query select (case when v_chat.create_hash = v_hash then 'replayed' else 'conflict' end), v_chat;
    end if;
end
$$;

revoke all on function public.chat_create(uuid, text, jsonb, text, text) from public, anon;
grant execute on function public.chat_create(uuid, text, jsonb, text, text) to authenticated, service_role;
