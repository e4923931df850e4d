-- Context memory: each user's structured slots and rolling summaries (memory_plugin/context/).
--
-- memory_slots: one jsonb document per user, field -> entries (goal, constraints, rejections, preferences,
-- schedule, targets, reminder_pref, progress_markers, profile), each entry with its provenance. Writers patch
-- fields, never the whole document: `slots || patch`, applied only if the fields the patch changes still hold
-- what the writer read (compare-and-set per field, in the upsert's WHERE), so concurrent patches to
-- different fields both land and a race on one field is retried by the writer.
--
-- memory_summaries: the rolling summary of a user ('user') or of one session ('session:<id>'), versioned;
-- the newest 3 versions are kept so that a bad update can be rolled back.
--
-- No functions: the application runs plain statements as the user (role authenticated with the user's JWT
-- claims), and RLS keeps users apart exactly as on user_memory.

create table public.memory_slots (
    user_id    uuid        primary key,
    slots      jsonb       not null default '{}'::jsonb check (jsonb_typeof(slots) = 'object'),
    updated_at timestamptz not null default now()
);

comment on table public.memory_slots is
    'Structured slots of each user (memory_plugin): field -> entries with provenance, patched field by field. RLS: a user sees only their own row.';

create table public.memory_summaries (
    user_id       uuid        not null,
    scope         text        not null check (scope = 'user' or scope like 'session:%'),
    version       integer     not null check (version >= 1),
    content       text        not null check (char_length(content) between 1 and 20000),
    -- model: written by the summarizer model; extractive: built offline from the messages; resync: rebuilt
    -- from the user's current facts.
    kind          text        not null check (kind in ('model', 'extractive', 'resync')),
    language      text,
    -- Messages covered so far, and the newest one's timestamp: later messages are the new ones.
    message_count integer     not null default 0 check (message_count >= 0),
    covered_until timestamptz,
    -- The oldest message it covers; null when it builds on earlier sessions' summary (or on the facts).
    covered_from  timestamptz,
    -- When the summary was last rebuilt from the facts (carried from version to version).
    resynced_at   timestamptz,
    created_at    timestamptz not null default now(),
    primary key (user_id, scope, version)
);

comment on table public.memory_summaries is
    'Rolling summaries of each user and session (memory_plugin), newest 3 versions kept for rollback. RLS: a user sees only their own rows.';

alter table public.memory_slots enable row level security;
alter table public.memory_summaries enable row level security;

create policy memory_slots_select_own on public.memory_slots
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_slots_insert_own on public.memory_slots
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_slots_update_own on public.memory_slots
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_slots_delete_own on public.memory_slots
    for delete to authenticated using ((select auth.uid()) = user_id);

create policy memory_summaries_select_own on public.memory_summaries
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_summaries_insert_own on public.memory_summaries
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_summaries_update_own on public.memory_summaries
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_summaries_delete_own on public.memory_summaries
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table public.memory_slots from anon, authenticated;
revoke all on table public.memory_summaries from anon, authenticated;
grant select, insert, update, delete on table public.memory_slots to authenticated;
grant select, insert, update, delete on table public.memory_summaries to authenticated;
grant all on table public.memory_slots to service_role;
grant all on table public.memory_summaries to service_role;
