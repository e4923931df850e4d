-- memory_usage_add: a removal only lowers an existing count, never creates one (erasing a user deleted their
-- counts first, then their rows, whose deletion left a zero count behind).

create or replace function memory_private.memory_usage_add(p_user_id uuid, p_counted text, p_delta bigint, p_enforce boolean)
    returns bigint
    language plpgsql
    set search_path = ''
as $$
declare
    v_n     bigint;
    v_limit double precision;
begin
    if p_delta <= 0 then
        update memory_private.memory_usage u set n = greatest(0, u.n + p_delta)
         where u.user_id = p_user_id and u.counted = p_counted
        returning u.n into v_n;
        return coalesce(v_n, 0);
    end if;
    insert into memory_private.memory_usage as u (user_id, counted, n)
    values (p_user_id, p_counted, p_delta)
    on conflict (user_id, counted) do update set n = u.n + p_delta
    returning u.n into v_n;
    if p_enforce then
        v_limit := memory_private.memory_limit(p_user_id, p_counted);
        if v_n > v_limit then
            raise exception using
                errcode = 'PT413',
                message = format('limit reached: user %s would have %s rows counted as %s, the limit is %s; nothing was written',
                                 p_user_id, v_n, p_counted, v_limit),
                hint = 'delete some rows first (or ask the operator to raise memory_private.memory_limits)';
        end if;
    end if;
    return v_n;
end;
$$;

