-- memory_consent: the user's memory switch. While `paused`, the plugin stores nothing new about the user (facts,
-- notes, extraction; reads go on). One row per user who ever used the switch; no row means memory is on. In the
-- database, so every process of the application sees the same switch at its next write.

create table memory_private.memory_consent (
    user_id    uuid        primary key,
    paused     boolean     not null default false,
    updated_at timestamptz not null default now()
);

comment on table memory_private.memory_consent is
    'The memory switch of each user (memory_plugin): while paused, nothing new is stored about them. RLS: a user sees and sets only their own row.';

alter table memory_private.memory_consent enable row level security;

create policy memory_consent_select_own on memory_private.memory_consent
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_consent_insert_own on memory_private.memory_consent
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy memory_consent_update_own on memory_private.memory_consent
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy memory_consent_delete_own on memory_private.memory_consent
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table memory_private.memory_consent from anon, authenticated;
grant select, insert, update, delete on table memory_private.memory_consent to authenticated;
grant all on table memory_private.memory_consent to service_role;
