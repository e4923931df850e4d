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
-- rows that stopped being facts, only lowers a count). One read of the user's limits, one upsert of the bucket
-- and one of the counters: a one-fact write ran 2 trigger functions, 5 nested calls and 12 statements here,
-- 0.72 ms a write at load ~12 (pg_stat_user_functions); now 1 call and 4 statements.
create function memory_private.user_memory_charge(
    p_user_id uuid, p_items bigint, p_facts bigint, p_patterns bigint, p_preferences bigint, p_projects bigint,
    p_enforce boolean
)
    returns void
    language plpgsql
    set search_path = ''
as $$
declare
    v_rate     double precision;
    v_burst    double precision;
    v_facts    double precision;
    v_patterns double precision;
    v_prefs    double precision;
    v_projects double precision;
    v_tokens   double precision;
    v_limit    double precision;
    c          record;
    v_gains    boolean := greatest(p_facts, p_patterns, p_preferences, p_projects) > 0;
begin
    if p_enforce and (p_items > 0 or v_gains) then
        if p_items > 0 then
            perform memory_private.memory_refuse_paused(p_user_id);
        end if;
        -- The user's own row of each limit, else the default row (as memory_limit), in one read.
        select coalesce(max(l.value) filter (where l.name = 'write_rate_per_second' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'write_rate_per_second'), 'Infinity'),
               coalesce(max(l.value) filter (where l.name = 'write_burst' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'write_burst'), 'Infinity'),
               coalesce(max(l.value) filter (where l.name = 'facts_per_user' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'facts_per_user'), 'Infinity'),
               coalesce(max(l.value) filter (where l.name = 'patterns_per_user' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'patterns_per_user'), 'Infinity'),
               coalesce(max(l.value) filter (where l.name = 'preferences_per_user' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'preferences_per_user'), 'Infinity'),
               coalesce(max(l.value) filter (where l.name = 'projects_per_user' and l.user_id is not null),
                        max(l.value) filter (where l.name = 'projects_per_user'), 'Infinity')
          into v_rate, v_burst, v_facts, v_patterns, v_prefs, v_projects
          from memory_private.memory_limits l
         where l.user_id = p_user_id or l.user_id is null;
        -- The write bucket: refilled at the rate since its last charge, up to the burst, then charged.
        if v_rate > 0 and p_items > 0 then
            insert into memory_private.memory_write_buckets as b (user_id, tokens, refilled_at)
            values (p_user_id, v_burst - p_items, clock_timestamp())
            on conflict (user_id) do update
                set tokens = least(v_burst, b.tokens
                                            + greatest(0, extract(epoch from clock_timestamp() - b.refilled_at))
                                              * v_rate) - p_items,
                    refilled_at = greatest(b.refilled_at, clock_timestamp())
            returning b.tokens into v_tokens;
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
    -- Rows gained, in the counters' key order (one lock order for concurrent writers of the user).
    if v_gains then
        for c in insert into memory_private.memory_usage as u (user_id, counted, n)
                 select p_user_id, d.counted, d.n
                   from (values ('facts_per_user', p_facts), ('patterns_per_user', p_patterns),
                                ('preferences_per_user', p_preferences), ('projects_per_user', p_projects))
                            as d(counted, n)
                  where d.n > 0
                 on conflict (user_id, counted) do update set n = u.n + excluded.n
                 returning u.counted, u.n loop
            if p_enforce then
                v_limit := case c.counted when 'facts_per_user' then v_facts when 'patterns_per_user' then v_patterns
                                          when 'preferences_per_user' then v_prefs else v_projects end;
                if c.n > v_limit then
                    raise exception using
                        errcode = 'PT413',
                        message = format('limit reached: user %s would have %s rows counted as %s, the limit is %s;'
                                         ' nothing was written', p_user_id, c.n, c.counted, v_limit),
                        hint = 'delete some rows first (or ask the operator to raise memory_private.memory_limits)';
                end if;
            end if;
        end loop;
    end if;
    if p_facts < 0 then
        perform memory_private.memory_usage_add(p_user_id, 'facts_per_user', p_facts, false);
    end if;
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
