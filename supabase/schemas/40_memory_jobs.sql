-- memory_jobs: memory work done after an answer (fact extraction), off the request path, durable and shared
-- by every worker process of the database.
--
-- Why a table read with FOR UPDATE SKIP LOCKED and not pgmq / Supabase Queues: pgmq is an extension the
-- embedded server (the default) and plain self-hosted PostgreSQL do not ship; a table needs nothing but
-- PostgreSQL, and it gives what a message queue does not: one pending job per session that absorbs later
-- messages (coalescing), one job of a session at a time in order (single flight), and the user's jobs erased
-- with the user (every table with a user_id column is).
--
-- A job carries the messages to extract from (sessions live in the RAM of the process that served them;
-- another worker cannot read them) and a write_id: its facts are written with memory_upsert_items' idempotency
-- key, so a job run again after a crash between its write and its completion applies its write once.
--
-- Life of a job: deferred (the user's waiting jobs are at their limit: kept in the user's backlog until
-- memory_jobs_promote makes it pending) → pending (absorbs the session's later messages) → running (leased to a worker until
-- leased_until; an expired lease is claimed again) → deleted when done; on failure retry (run_after with
-- exponential backoff) and, after the configured number of attempts, dead (kept 7 days, visible, retryable with
-- memory_jobs_retry_dead). A session's jobs run one at a time, oldest first. The messages a job carries are
-- redacted by the plugin before they are queued (the privacy filter's secret redaction, as the outage journal).
--
-- Access: users may read (and cancel) their own jobs under RLS. The queue functions are security invoker and
-- executable only by memory_worker (the role the plugin switches to for queue statements; a policy lets it
-- see every user's jobs, as a queue must) and service_role: a user cannot claim, read or change another
-- user's work, nor enqueue work through PostgREST.

do $$
begin
    if not exists (select from pg_roles where rolname = 'memory_worker') then
        create role memory_worker nologin noinherit;
    end if;
end
$$;

create table public.memory_jobs (
    id           bigint generated always as identity primary key,
    user_id      uuid        not null,
    session_id   text        not null,
    kind         text        not null default 'extract' check (kind in ('extract')),
    state        text        not null default 'pending'
                             check (state in ('pending', 'retry', 'running', 'dead', 'deferred')),
    -- {"messages": [Message...], "trigger": "...", "forgotten": ["content of a memory forgotten since", ...]}
    payload      jsonb       not null,
    write_id     uuid        not null default gen_random_uuid(),
    attempts     integer     not null default 0,
    run_after    timestamptz not null default now(),
    leased_by    text,
    leased_until timestamptz,
    last_error   text,
    created_at   timestamptz not null default now(),
    updated_at   timestamptz not null default now()
);

comment on table public.memory_jobs is
    'Memory work queued after an answer (memory_plugin background worker): pending, running (leased), retry, dead.';

-- Coalescing: at most one pending job per session; a later trigger adds its messages to it.
create unique index memory_jobs_one_pending_per_session on public.memory_jobs (user_id, session_id)
    where state = 'pending';
-- A user's backlog: at most one deferred job per session (its later messages join it), see memory_jobs_enqueue.
create unique index memory_jobs_one_deferred_per_session on public.memory_jobs (user_id, session_id)
    where state = 'deferred';
-- Single flight and order: a job runs only when no older unfinished job of its session exists.
create index memory_jobs_session_order on public.memory_jobs (user_id, session_id, id) where state <> 'dead';
create index memory_jobs_due on public.memory_jobs (run_after, id) where state <> 'dead';
create index memory_jobs_user_id_idx on public.memory_jobs (user_id);
create index memory_jobs_dead_idx on public.memory_jobs (updated_at) where state = 'dead';

alter table public.memory_jobs enable row level security;

create policy memory_jobs_select_own on public.memory_jobs
    for select to authenticated using ((select auth.uid()) = user_id);
create policy memory_jobs_delete_own on public.memory_jobs
    for delete to authenticated using ((select auth.uid()) = user_id);

-- The worker role serves every user's jobs (claiming, completing, the queue's counts).
create policy memory_jobs_worker_all on public.memory_jobs
    for all to memory_worker using (true) with check (true);

revoke all on table public.memory_jobs from anon, authenticated;
-- Update is granted so that a client trying it gets "no rows" (there is no update policy), as on user_memory.
grant select, update, delete on table public.memory_jobs to authenticated;
grant select, insert, update, delete on table public.memory_jobs to memory_worker;
grant all on table public.memory_jobs to service_role;

-- The last p_keep elements of a JSON array (a coalesced job keeps the session window's size).
create or replace function memory_private.memory_jobs_tail(p_items jsonb, p_keep integer)
    returns jsonb
    language sql immutable
    set search_path = ''
as $$
    select coalesce(jsonb_agg(e.value order by e.ord), '[]'::jsonb)
      from jsonb_array_elements(p_items) with ordinality as e(value, ord)
     where e.ord > jsonb_array_length(p_items) - p_keep
$$;

-- Enqueue (or coalesce into the session's pending job). Returns the job id and 'queued', 'coalesced' or
-- 'deferred', or a null id and 'full'. Fair: a user holding p_max_pending_per_user waiting jobs is over their
-- limit; the whole queue's limit (p_max_pending waiting jobs) counts only against users already holding a waiting
-- job, so one user filling the queue never refuses another user's extraction (each may always have one job).
-- Over the limit the messages are not refused but deferred: kept in the user's backlog, one 'deferred' job per
-- session (never claimed, coalescing the session's later messages so their order holds), made pending by
-- memory_jobs_promote when the user's waiting jobs fall below the limit. The backlog is bounded too: at most
-- 10 × p_max_pending_per_user deferred sessions per user (1,000 at the default 100), each a session window of
-- messages; past that the trigger is 'full' and the caller keeps the messages. Messages are stored redacted by
-- the plugin, as every job's. One enqueue per user at a time (a transaction-scoped advisory lock), so the
-- user's counts are exact.
create or replace function memory_private.memory_jobs_enqueue(
    p_user_id uuid, p_session_id text, p_messages jsonb, p_trigger text, p_max_pending integer, p_max_messages integer,
    p_max_pending_per_user integer
)
    returns table (job_id bigint, outcome text)
    language plpgsql volatile
    security invoker
    set search_path = ''
as $$
declare
    v_id   bigint;
    v_mine bigint;
    v_over boolean;
begin
    perform pg_advisory_xact_lock(hashtextextended('memory_jobs:' || p_user_id::text, 0));
    update public.memory_jobs j
       set payload = j.payload
                     || jsonb_build_object('messages', memory_private.memory_jobs_tail(j.payload -> 'messages' || p_messages, p_max_messages),
                                           'trigger', p_trigger),
           updated_at = now()
     where j.user_id = p_user_id and j.session_id = p_session_id and j.state = 'pending'
    returning j.id into v_id;
    if v_id is not null then
        return query select v_id, 'coalesced'::text;
        return;
    end if;
    select count(*) into v_mine from public.memory_jobs j where j.user_id = p_user_id and j.state in ('pending', 'retry');
    v_over := v_mine >= p_max_pending_per_user
              or (v_mine > 0
                  and (select count(*) from public.memory_jobs j where j.state in ('pending', 'retry')) >= p_max_pending);
    -- The session's deferred job takes its later messages (after the ones it holds); under the limit it is due.
    update public.memory_jobs j
       set payload = j.payload
                     || jsonb_build_object('messages', memory_private.memory_jobs_tail(j.payload -> 'messages' || p_messages, p_max_messages),
                                           'trigger', p_trigger),
           state = case when v_over then 'deferred' else 'pending' end,
           run_after = now(),
           updated_at = now()
     where j.user_id = p_user_id and j.session_id = p_session_id and j.state = 'deferred'
    returning j.id into v_id;
    if v_id is not null then
        return query select v_id, (case when v_over then 'deferred' else 'queued' end);
        return;
    end if;
    if v_over then
        if (select count(*) from public.memory_jobs j where j.user_id = p_user_id and j.state = 'deferred')
           >= 10 * p_max_pending_per_user then
            return query select null::bigint, 'full'::text;
            return;
        end if;
        insert into public.memory_jobs (user_id, session_id, state, payload)
        values (p_user_id, p_session_id, 'deferred',
                jsonb_build_object('messages', memory_private.memory_jobs_tail(p_messages, p_max_messages), 'trigger', p_trigger))
        returning id into v_id;
        return query select v_id, 'deferred'::text;
        return;
    end if;
    insert into public.memory_jobs as j (user_id, session_id, payload)
    values (p_user_id, p_session_id,
            jsonb_build_object('messages', memory_private.memory_jobs_tail(p_messages, p_max_messages), 'trigger', p_trigger))
    on conflict (user_id, session_id) where state = 'pending' do update
       set payload = j.payload
                     || jsonb_build_object('messages', memory_private.memory_jobs_tail(j.payload -> 'messages' || p_messages, p_max_messages),
                                           'trigger', p_trigger),
           updated_at = now()
    returning j.id into v_id;
    return query select v_id, 'queued'::text;
end
$$;

-- Make deferred jobs due for users whose waiting jobs fell below their limit (the rule of memory_jobs_enqueue):
-- the users given, or, with null, the 50 users whose deferred jobs are oldest. Oldest first, one session's
-- deferred job at most (it holds the session's messages in order). Returns how many jobs became pending. Called
-- by workers before they claim (memory_plugin: at most once a second per worker).
create or replace function memory_private.memory_jobs_promote(
    p_users uuid[], p_max_pending integer, p_max_pending_per_user integer
)
    returns integer
    language plpgsql volatile
    security invoker
    set search_path = ''
as $$
declare
    v_user  uuid;
    v_mine  bigint;
    v_room  bigint;
    v_total bigint;
    v_moved integer := 0;
    v_n     integer;
begin
    for v_user in
        select d.user_id from public.memory_jobs d
         where d.state = 'deferred' and (p_users is null or d.user_id = any(p_users))
         group by d.user_id order by min(d.id) limit 50
    loop
        perform pg_advisory_xact_lock(hashtextextended('memory_jobs:' || v_user::text, 0));
        select count(*) into v_mine from public.memory_jobs j where j.user_id = v_user and j.state in ('pending', 'retry');
        select count(*) into v_total from public.memory_jobs j where j.state in ('pending', 'retry');
        v_room := case when v_total < p_max_pending then p_max_pending_per_user - v_mine
                       when v_mine = 0 then 1 else 0 end;
        continue when v_room <= 0;
        with due as (
            select d.id from public.memory_jobs d
             where d.user_id = v_user and d.state = 'deferred'
               and not exists (select 1 from public.memory_jobs p
                                where p.user_id = d.user_id and p.session_id = d.session_id and p.state = 'pending')
             order by d.id
             limit v_room
        )
        update public.memory_jobs j set state = 'pending', run_after = now(), updated_at = now()
          from due where j.id = due.id;
        get diagnostics v_n = row_count;
        v_moved := v_moved + v_n;
    end loop;
    return v_moved;
end
$$;

-- Claim up to p_limit due jobs for p_worker: pending or retry jobs whose time has come, and running jobs whose
-- lease expired (their worker died). Only the oldest unfinished job of a session is claimable.
create or replace function memory_private.memory_jobs_claim(p_worker text, p_limit integer, p_lease_seconds real)
    returns setof public.memory_jobs
    language sql volatile
    security invoker
    set search_path = ''
as $$
    -- Dead jobs expire after 7 days (a week to inspect and retry them; their payload is redacted, yet not kept
    -- forever). Every claim deletes what is due: one range of the partial index below, usually empty.
    with expired as (
        delete from public.memory_jobs j where j.state = 'dead' and j.updated_at < now() - interval '7 days'
    ),
    due as (
        select j.id
          from public.memory_jobs j
         where ((j.state in ('pending', 'retry') and j.run_after <= now())
                or (j.state = 'running' and j.leased_until < now()))
           and not exists (select 1 from public.memory_jobs o
                            where o.user_id = j.user_id and o.session_id = j.session_id
                              and o.state <> 'dead' and o.id < j.id)
         order by j.run_after, j.id
         limit p_limit
           for update of j skip locked
    )
    update public.memory_jobs j
       set state = 'running', attempts = j.attempts + 1, leased_by = p_worker,
           leased_until = now() + make_interval(secs => p_lease_seconds), updated_at = now()
      from due
     where j.id = due.id
    returning j.*
$$;

-- Keep a running job's lease (a long extraction is not claimed again while its worker is alive).
create or replace function memory_private.memory_jobs_extend(p_id bigint, p_worker text, p_lease_seconds real)
    returns boolean
    language sql volatile
    security invoker
    set search_path = ''
as $$
    with kept as (
        update public.memory_jobs set leased_until = now() + make_interval(secs => p_lease_seconds)
         where id = p_id and leased_by = p_worker and state = 'running'
        returning 1
    )
    select exists (select from kept)
$$;

-- Inside the worker's write transaction: lock the job (FOR SHARE: an erase or a forget waits for the write)
-- and return the contents forgotten since it was queued; no row when the job is gone (user erased, job
-- cancelled, lease lost to another worker): its work must not be applied.
create or replace function memory_private.memory_jobs_hold(p_id bigint, p_worker text)
    returns table (forgotten jsonb)
    language sql volatile
    security invoker
    set search_path = ''
as $$
    select coalesce(j.payload -> 'forgotten', '[]'::jsonb)
      from public.memory_jobs j
     where j.id = p_id and j.leased_by = p_worker and j.state = 'running'
       for share
$$;

create or replace function memory_private.memory_jobs_complete(p_id bigint, p_worker text)
    returns boolean
    language sql volatile
    security invoker
    set search_path = ''
as $$
    with done as (delete from public.memory_jobs where id = p_id and leased_by = p_worker returning 1)
    select exists (select from done)
$$;

-- A failed attempt: retry after p_delay_seconds, or dead (kept for inspection and memory_jobs_retry_dead).
create or replace function memory_private.memory_jobs_fail(
    p_id bigint, p_worker text, p_error text, p_delay_seconds real, p_dead boolean
)
    returns boolean
    language sql volatile
    security invoker
    set search_path = ''
as $$
    with failed as (
        update public.memory_jobs
           set state = case when p_dead then 'dead' else 'retry' end,
               run_after = now() + make_interval(secs => p_delay_seconds),
               leased_by = null, leased_until = null, last_error = left(p_error, 2000), updated_at = now()
         where id = p_id and leased_by = p_worker and state = 'running'
        returning 1
    )
    select exists (select from failed)
$$;

-- Give a claimed job back untried (a worker closing before it could run it): due again now, attempt refunded.
create or replace function memory_private.memory_jobs_release(p_id bigint, p_worker text)
    returns boolean
    language sql volatile
    security invoker
    set search_path = ''
as $$
    with released as (
        update public.memory_jobs
           set state = 'retry', run_after = now(), attempts = greatest(attempts - 1, 0),
               leased_by = null, leased_until = null, updated_at = now()
         where id = p_id and leased_by = p_worker and state = 'running'
        returning 1
    )
    select exists (select from released)
$$;

-- A memory of the user was forgotten: every unfinished job of the user drops facts matching these contents.
create or replace function memory_private.memory_jobs_forget(p_user_id uuid, p_contents jsonb)
    returns integer
    language sql volatile
    security invoker
    set search_path = ''
as $$
    with marked as (
        update public.memory_jobs
           set payload = payload || jsonb_build_object('forgotten', coalesce(payload -> 'forgotten', '[]'::jsonb) || p_contents),
               updated_at = now()
         where user_id = p_user_id
        returning 1
    )
    select count(*)::integer from marked
$$;

-- Dead jobs (all, or one user's) due again, with a fresh count of attempts.
create or replace function memory_private.memory_jobs_retry_dead(p_user_id uuid default null)
    returns integer
    language sql volatile
    security invoker
    set search_path = ''
as $$
    with revived as (
        update public.memory_jobs
           set state = 'retry', attempts = 0, run_after = now(), updated_at = now()
         where state = 'dead' and (p_user_id is null or user_id = p_user_id)
        returning 1
    )
    select count(*)::integer from revived
$$;

create or replace function memory_private.memory_jobs_status()
    returns table (pending bigint, running bigint, retrying bigint, dead bigint, failed_attempts bigint,
                   oldest_pending_at timestamptz, deferred bigint)
    language sql stable
    security invoker
    set search_path = ''
as $$
    select count(*) filter (where state = 'pending'),
           count(*) filter (where state = 'running'),
           count(*) filter (where state = 'retry'),
           count(*) filter (where state = 'dead'),
           coalesce(sum(attempts) filter (where last_error is not null), 0)::bigint,
           min(created_at) filter (where state <> 'dead'),
           count(*) filter (where state = 'deferred')
      from public.memory_jobs
$$;

-- Which of these jobs are still unsettled (pending or running): what flush waits for.
create or replace function memory_private.memory_jobs_unsettled(p_ids bigint[])
    returns setof bigint
    language sql stable
    security invoker
    set search_path = ''
as $$
    select id from public.memory_jobs where id = any(p_ids) and state in ('pending', 'running')
$$;

do $$
declare
    f text;
begin
    foreach f in array array[
        'memory_private.memory_jobs_tail(jsonb, integer)',
        'memory_private.memory_jobs_enqueue(uuid, text, jsonb, text, integer, integer, integer)',
        'memory_private.memory_jobs_promote(uuid[], integer, integer)',
        'memory_private.memory_jobs_claim(text, integer, real)',
        'memory_private.memory_jobs_extend(bigint, text, real)',
        'memory_private.memory_jobs_hold(bigint, text)',
        'memory_private.memory_jobs_complete(bigint, text)',
        'memory_private.memory_jobs_fail(bigint, text, text, real, boolean)',
        'memory_private.memory_jobs_release(bigint, text)',
        'memory_private.memory_jobs_forget(uuid, jsonb)',
        'memory_private.memory_jobs_retry_dead(uuid)',
        'memory_private.memory_jobs_status()',
        'memory_private.memory_jobs_unsettled(bigint[])'
    ] loop
        execute format('revoke all on function %s from public, anon, authenticated', f);
        execute format('grant execute on function %s to memory_worker, service_role', f);
    end loop;
end
$$;
grant usage on schema public, memory_private to memory_worker;
