-- A fair job queue: a per-user limit of waiting jobs, and the queue's own limit refuses only users already
-- holding one (memory_jobs_enqueue gets p_max_pending_per_user); dead jobs expire after 7 days (memory_jobs_claim).

drop function memory_private.memory_jobs_enqueue(uuid, text, jsonb, text, integer, integer);

create index memory_jobs_dead_idx on public.memory_jobs (updated_at) where state = 'dead';

-- Enqueue (or coalesce into the session's pending job). Returns the job id and 'queued' or 'coalesced', or a
-- null id and 'full' (the caller keeps the messages). Fair: a user holding p_max_pending_per_user waiting jobs
-- is refused; the whole queue's limit (p_max_pending waiting jobs) refuses only users already holding a waiting
-- job, so one user filling the queue never refuses another user's extraction (each may always have one job).
-- One enqueue per user at a time (a transaction-scoped advisory lock), so the user's count is exact.
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
    if v_mine >= p_max_pending_per_user
       or (v_mine > 0
           and (select count(*) from public.memory_jobs j where j.state in ('pending', 'retry')) >= p_max_pending) then
        return query select null::bigint, 'full'::text;
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

revoke all on function memory_private.memory_jobs_enqueue(uuid, text, jsonb, text, integer, integer, integer)
    from public, anon, authenticated;
grant execute on function memory_private.memory_jobs_enqueue(uuid, text, jsonb, text, integer, integer, integer)
    to memory_worker, service_role;
