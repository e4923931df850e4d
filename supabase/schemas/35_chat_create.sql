-- chat_create: a new chat for the user, at most once per idempotency key. A client that retries a create (after
-- a timeout, a 503, a dropped connection) cannot know whether the first attempt committed: the key is stored on
-- the chat row itself (`create_key`, unique per user), in the same statement as the chat, so a retry finds the
-- chat the first attempt made. Bounded by what bounds chats (the chats per user count): no table of its own.
--
-- Returns one row whose `outcome` is 'created'; 'replayed' when the user already has a chat made with the key
-- and the same request hash (`p_request_hash`, default the turns' md5): that chat, as it is now; or 'conflict'
-- when the key made a chat from another request (nothing created). Without a key every call creates. No row
-- when the chat made with the key was deleted meanwhile by a racing request. Security invoker: RLS refuses a
-- chat for any other user than the caller, whatever `p_user_id` says.
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
