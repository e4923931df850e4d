-- A user's extraction over their waiting-job limit is deferred, not refused: a 'deferred' job per session in the
-- user's backlog, made pending by memory_jobs_promote when the user's waiting jobs fall below the limit (see
-- supabase/schemas/40_memory_jobs.sql, the current definition). memory_jobs_status also counts deferred jobs.
alter table public.memory_jobs drop constraint memory_jobs_state_check;
alter table public.memory_jobs add constraint memory_jobs_state_check
    check (state in ('pending', 'retry', 'running', 'dead', 'deferred'));

-- A user's backlog: at most one deferred job per session (its later messages join it), see memory_jobs_enqueue.
create unique index memory_jobs_one_deferred_per_session on public.memory_jobs (user_id, session_id)
    where state = 'deferred';

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

drop function memory_private.memory_jobs_status();
create function memory_private.memory_jobs_status()
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


revoke all on function memory_private.memory_jobs_promote(uuid[], integer, integer) from public, anon, authenticated;
grant execute on function memory_private.memory_jobs_promote(uuid[], integer, integer) to memory_worker, service_role;
revoke all on function memory_private.memory_jobs_status() from public, anon, authenticated;
grant execute on function memory_private.memory_jobs_status() to memory_worker, service_role;
