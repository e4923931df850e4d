-- The bounds of user_memory in one pass: the fact count, the counts of the other kinds, the write rate and the
-- memory switch were two statement triggers (user_memory_bounds, user_memory_kind_bounds) calling a function
-- per check, each reading the user's limits again; now one trigger and one function per user
-- (user_memory_charge) reading the limits once and moving the counters in one upsert. Same refusals, same
-- counters: the rows of memory_usage and memory_write_buckets are kept as they are.

-- user_memory: one user's charge for a statement's rows, for user_memory_bounds below. As `authenticated`
-- (p_enforce) a statement that wrote rows (p_items > 0) is refused while the user's memory is paused (PT423,
-- 81_memory_consent.sql) or past their write rate (PT429: p_items tokens of their bucket), and any statement
-- past the count of a kind (PT413: `facts_per_user`, `patterns_per_user`, `preferences_per_user`,
-- `projects_per_user`, i.e. `<kind>s_per_user`); the counts move by the deltas either way (a negative delta,
-- rows that stopped being facts, only lowers a count). The user's limits and switch in one read, then a plain
-- update of the bucket and of each counter gained (an insert only for a user's first row of one). A one-fact
-- insert ran 2 trigger functions, 8 nested calls and 13 statements here (three reads of the limits, two
-- upserts); now 1, 2 and 6. The server's CPU per one-fact write moved by 1-2 % only (bench/README.md): what
-- the bounds cost, ~0.35 ms of 2.6 at load ~10, is mostly their two row updates, which enforcing them needs.
create function memory_private.user_memory_charge(
    p_user_id uuid, p_items bigint, p_facts bigint, p_patterns bigint, p_preferences bigint, p_projects bigint,
    p_enforce boolean
)
    returns void
    language plpgsql
    set search_path = ''
as $$
declare
    v_names  text[] := array['facts_per_user', 'patterns_per_user', 'preferences_per_user', 'projects_per_user'];
    v_deltas bigint[] := array[p_facts, p_patterns, p_preferences, p_projects];
    v_limits double precision[];
    v_rate   double precision;
    v_burst  double precision;
    v_paused boolean;
    v_tokens double precision;
    v_n      bigint;
begin
    if p_enforce and (p_items > 0 or greatest(p_facts, p_patterns, p_preferences, p_projects) > 0) then
        -- The user's own row of each limit, else the default row (as memory_limit), and the switch, in one read.
        select coalesce(max(l.value) filter (where l.name = 'write_rate_per_second' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'write_rate_per_second'), 'Infinity'),
               coalesce(max(l.value) filter (where l.name = 'write_burst' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'write_burst'), 'Infinity'),
               array[coalesce(max(l.value) filter (where l.name = 'facts_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'facts_per_user'), 'Infinity'),
                     coalesce(max(l.value) filter (where l.name = 'patterns_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'patterns_per_user'), 'Infinity'),
                     coalesce(max(l.value) filter (where l.name = 'preferences_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'preferences_per_user'), 'Infinity'),
                     coalesce(max(l.value) filter (where l.name = 'projects_per_user' and l.user_id is not null),
                              max(l.value) filter (where l.name = 'projects_per_user'), 'Infinity')],
               -- fenced as in memory_refuse_paused (the primary key's order, `limit 1`)
               exists (select from (select c.user_id, c.paused from memory_private.memory_consent c
                                     where c.user_id >= p_user_id order by c.user_id limit 1) as c
                        where c.user_id = p_user_id and c.paused)
          into v_rate, v_burst, v_limits, v_paused
          from memory_private.memory_limits l
         where l.user_id = p_user_id or l.user_id is null;
        if v_paused and p_items > 0 then
            perform memory_private.memory_refuse_paused(p_user_id);  -- raises PT423
        end if;
        -- The write bucket: refilled at the rate since its last charge, up to the burst, then charged.
        if v_rate > 0 and p_items > 0 then
            update memory_private.memory_write_buckets b
               set tokens = least(v_burst, b.tokens
                                           + greatest(0, extract(epoch from clock_timestamp() - b.refilled_at))
                                             * v_rate) - p_items,
                   refilled_at = greatest(b.refilled_at, clock_timestamp())
             where b.user_id = p_user_id
            returning b.tokens into v_tokens;
            if not found then
                insert into memory_private.memory_write_buckets as b (user_id, tokens, refilled_at)
                values (p_user_id, v_burst - p_items, clock_timestamp())
                on conflict (user_id) do update
                    set tokens = least(v_burst, b.tokens
                                                + greatest(0, extract(epoch from clock_timestamp() - b.refilled_at))
                                                  * v_rate) - p_items,
                        refilled_at = greatest(b.refilled_at, clock_timestamp())
                returning b.tokens into v_tokens;
            end if;
            if v_tokens < 0 then
                raise exception using
                    errcode = 'PT429',
                    message = format('writing too fast: user %s wrote %s rows; the limit is %s at once and %s'
                                     ' per second', p_user_id, p_items, v_burst, v_rate),
                    detail = case when p_items <= v_burst
                                  then format('retry_after=%s', round((-v_tokens / v_rate)::numeric, 3))
                                  else 'retry_after=' end;
            end if;
        end if;
    end if;
    -- Each count gained, in the counters' key order (one lock order for concurrent writers of the user).
    for i in 1..4 loop
        if v_deltas[i] > 0 then
            update memory_private.memory_usage u set n = u.n + v_deltas[i]
             where u.user_id = p_user_id and u.counted = v_names[i]
            returning u.n into v_n;
            if not found then
                insert into memory_private.memory_usage as u (user_id, counted, n)
                values (p_user_id, v_names[i], v_deltas[i])
                on conflict (user_id, counted) do update set n = u.n + excluded.n
                returning u.n into v_n;
            end if;
            if p_enforce and v_n > v_limits[i] then
                raise exception using
                    errcode = 'PT413',
                    message = format('limit reached: user %s would have %s rows counted as %s, the limit is %s;'
                                     ' nothing was written', p_user_id, v_n, v_names[i], v_limits[i]),
                    hint = 'delete some rows first (or ask the operator to raise memory_private.memory_limits)';
            end if;
        elsif v_deltas[i] < 0 then
            perform memory_private.memory_usage_add(p_user_id, v_names[i], v_deltas[i], false);
        end if;
    end loop;
end;
$$;

-- user_memory: every per-user bound of its rows in one statement trigger, one pass over the statement's rows per
-- user (user_memory_charge): the count of each kind, the write rate and the memory switch. Charged to the write
-- rate: rows inserted, and rows changed other than by retiring them (superseding, archiving), so a
-- reinforcement counts as a write, as in the plugin. A row whose kind changes moves between the counts of its
-- kinds by user_memory_kind_moved (92_memory_kind_bounds.sql); an update here counts only facts gained or lost.
create or replace function memory_private.user_memory_bounds() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
declare
    v_enforce boolean := memory_private.memory_bounds_enforced();
    r         record;
begin
    if tg_op = 'INSERT' then
        for r in select a.user_id, count(*) as items, count(*) filter (where a.kind = 'fact') as facts,
                        count(*) filter (where a.kind = 'pattern') as patterns,
                        count(*) filter (where a.kind = 'preference') as preferences,
                        count(*) filter (where a.kind = 'project') as projects
                   from added a group by a.user_id order by a.user_id loop
            perform memory_private.user_memory_charge(r.user_id, r.items, r.facts, r.patterns, r.preferences,
                                                      r.projects, v_enforce);
        end loop;
    elsif tg_op = 'DELETE' then
        for r in select d.user_id, d.kind || 's_per_user' as counted, count(*) as n from removed d
                  group by d.user_id, d.kind order by d.user_id, d.kind loop
            perform memory_private.memory_usage_add(r.user_id, r.counted, -r.n, false);
        end loop;
    else
        -- Facts gained (a row made a fact, or handed to another user by the service path) and rows written.
        for r in select coalesce(g.user_id, w.user_id) as user_id, coalesce(g.facts, 0) as facts,
                        coalesce(w.items, 0) as items
                   from (select x.user_id, sum(x.d) as facts
                           from (select a.user_id, 1 as d from added a where a.kind = 'fact'
                                 union all
                                 select d.user_id, -1 from removed d where d.kind = 'fact') x
                          group by x.user_id) g
                   full join (select a.user_id, count(*) as items
                                from added a join removed d on d.id = a.id
                               where not ((d.invalid_at is null and a.invalid_at is not null)
                                          or (d.archived_at is null and a.archived_at is not null))
                               group by a.user_id) w on w.user_id = g.user_id
                  order by 1 loop
            perform memory_private.user_memory_charge(r.user_id, r.items, r.facts, 0, 0, 0, v_enforce);
        end loop;
    end if;
    return null;
end;
$$;

revoke all on function memory_private.user_memory_charge(uuid, bigint, bigint, bigint, bigint, bigint, boolean)
    from public, anon, authenticated;
grant execute on function memory_private.user_memory_charge(uuid, bigint, bigint, bigint, bigint, bigint, boolean)
    to service_role;

drop trigger user_memory_kind_bounds_insert on public.user_memory;
drop trigger user_memory_kind_bounds_delete on public.user_memory;
drop function memory_private.user_memory_kind_bounds();
drop function memory_private.memory_write_take(uuid, bigint);
