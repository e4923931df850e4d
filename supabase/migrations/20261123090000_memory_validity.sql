-- Validity over time: when a memory was learned, until when it holds, what replaced it, extra metadata.
--
-- Nothing is destroyed when a memory stops being true: a superseded or retracted fact keeps its row with
-- `invalid_at` set (and `superseded_by` pointing at its replacement), so history stays queryable ("what
-- did the user prefer in March?"); an expired or archived one keeps its row too. Only rows that are
-- currently valid (`invalid_at` and `archived_at` null, `expires_at` null or in the future) reach a prompt:
-- memory_rank_facts and memory_context (20261123100000_memory_quality.sql) filter them, in SQL, at read time
-- (no nightly rewrite needed); memory_upsert_items there writes occurred_at, expires_at and metadata.

alter table public.user_memory
    add column occurred_at   timestamptz,
    add column expires_at    timestamptz,
    add column invalid_at    timestamptz,
    add column superseded_by uuid references public.user_memory (id) on delete set null,
    add column archived_at   timestamptz,
    add column metadata      jsonb not null default '{}'::jsonb;

comment on column public.user_memory.occurred_at is 'When the conversation that stated it happened (provenance); null when unknown.';
comment on column public.user_memory.expires_at is 'Temporary memories ("trip this weekend"): never shown after this time.';
comment on column public.user_memory.invalid_at is 'When it stopped being true (contradicted or retracted); the row is kept as history.';
comment on column public.user_memory.superseded_by is 'The memory that replaced this one, if any.';
comment on column public.user_memory.archived_at is 'Set by maintenance when its decayed confidence fell below the floor; kept, never shown.';
comment on column public.user_memory.metadata is 'Caller-supplied extras (e.g. a conversation turn id, a speaker).';

create index user_memory_superseded_by_idx on public.user_memory (superseded_by) where superseded_by is not null;
