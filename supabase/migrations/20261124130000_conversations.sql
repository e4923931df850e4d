-- conversations + conversation_entries: pydantic-ai's `ConversationStore` model (PostgresConversationStore), each
-- user's conversations as a log of messages each stored once. An entry holds one message (pydantic-ai's message
-- JSON) and points at the entry before it; a conversation's record points at its newest entry (`head_id`), lists
-- the tips of the branches it left, and carries what the messages cannot (usage, the deferred tool calls a paused
-- run waits on, the application's `scope`). A fork's record points into the entries of the conversation it was
-- forked from, so entries are shared, never copied.
--
-- Keys include `user_id`: conversation ids and entry ids are per user, so a user can never learn that another
-- user has a conversation of the same id (no unique violation, no foreign key reaching another user's entry).
-- Every statement runs as the user under RLS.

create table public.conversations (
    user_id                 uuid not null,
    conversation_id         text not null check (length(conversation_id) between 1 and 500),
    head_id                 text check (length(head_id) between 1 and 200),
    usage                   jsonb not null default '{}'::jsonb check (jsonb_typeof(usage) = 'object'),
    deferred_tool_requests  jsonb check (jsonb_typeof(deferred_tool_requests) = 'object'),
    scope                   text check (length(scope) <= 500),
    forked_from             text check (length(forked_from) between 1 and 500),
    forked_at               text check (length(forked_at) between 1 and 200),
    -- The last entries of the branches the conversation left, oldest first.
    branches                text[] not null default '{}',
    -- Changes on every save: a save or delete naming an older revision is refused (optimistic concurrency).
    revision                text not null check (length(revision) between 1 and 200),
    updated_at              timestamptz not null default now(),
    format_version          smallint not null default 1 check (format_version = 1),
    primary key (user_id, conversation_id)
);

create index conversations_user_updated_idx on public.conversations (user_id, updated_at desc);
create index conversations_user_scope_updated_idx on public.conversations (user_id, scope, updated_at desc);

create table public.conversation_entries (
    user_id     uuid not null,
    id          text not null check (length(id) between 1 and 200),
    parent_id   text,
    kind        text not null default 'message' check (kind = 'message'),
    message     jsonb not null check (jsonb_typeof(message) = 'object'),
    created_at  timestamptz not null default now(),
    primary key (user_id, id),
    -- The entry before it, of the same user (a parent of another user's is refused as one that does not exist).
    constraint conversation_entries_parent_fkey foreign key (user_id, parent_id)
        references public.conversation_entries (user_id, id)
);

-- Deleting an entry checks that no entry still points at it.
create index conversation_entries_parent_idx on public.conversation_entries (user_id, parent_id);

alter table public.conversations enable row level security;
alter table public.conversation_entries enable row level security;

create policy conversations_select_own on public.conversations
    for select to authenticated using ((select auth.uid()) = user_id);
create policy conversations_insert_own on public.conversations
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy conversations_update_own on public.conversations
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy conversations_delete_own on public.conversations
    for delete to authenticated using ((select auth.uid()) = user_id);

create policy conversation_entries_select_own on public.conversation_entries
    for select to authenticated using ((select auth.uid()) = user_id);
create policy conversation_entries_insert_own on public.conversation_entries
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy conversation_entries_update_own on public.conversation_entries
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy conversation_entries_delete_own on public.conversation_entries
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table public.conversations from anon, authenticated;
revoke all on table public.conversation_entries from anon, authenticated;
grant select, insert, update, delete on table public.conversations to authenticated;
grant select, insert, update, delete on table public.conversation_entries to authenticated;
grant all on table public.conversations to service_role;
grant all on table public.conversation_entries to service_role;
