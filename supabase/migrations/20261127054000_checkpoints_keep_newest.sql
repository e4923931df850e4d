-- Checkpoints past the per-user limit replace the user's oldest instead of being refused
-- (memory_bounds_count's 'keep_newest'; supabase/schemas/90_memory_bounds.sql).

-- Counting trigger of a table: tg_argv[0] is the limit's name (memory_limits.name, memory_usage.counted).
-- Statement-level with transition tables: one counter update per statement and user, whatever the rows.
-- With tg_argv[1] = 'keep_newest' a count past the limit is not refused: the user's oldest rows (lowest id) go
-- instead (workflow checkpoints: a recovery snapshot of an old session is worth less than a refused new one).
create or replace function memory_private.memory_bounds_count() returns trigger
    language plpgsql
    security definer
    set search_path = ''
as $$
declare
    v_enforce boolean := memory_private.memory_bounds_enforced();
    v_prune   boolean := coalesce(tg_argv[1], '') = 'keep_newest';
    v_n       bigint;
    v_limit   double precision;
    r         record;
begin
    if tg_op = 'INSERT' then
        for r in select a.user_id, count(*) as n from added a group by a.user_id order by a.user_id loop
            v_n := memory_private.memory_usage_add(r.user_id, tg_argv[0], r.n, v_enforce and not v_prune);
            v_limit := memory_private.memory_limit(r.user_id, tg_argv[0]);
            if v_prune and v_n > v_limit then
                execute format('delete from %I.%I t where t.user_id = $1 and t.id in (select o.id from %I.%I o'
                               ' where o.user_id = $1 order by o.id limit $2)',
                               tg_table_schema, tg_table_name, tg_table_schema, tg_table_name)
                    using r.user_id, (v_n - v_limit)::bigint;
            end if;
        end loop;
    else
        for r in select d.user_id, count(*) as n from removed d group by d.user_id order by d.user_id loop
            perform memory_private.memory_usage_add(r.user_id, tg_argv[0], -r.n, false);
        end loop;
    end if;
    return null;
end;
$$;

drop trigger workflow_checkpoints_count_insert on memory_private.workflow_checkpoints;
create trigger workflow_checkpoints_count_insert after insert on memory_private.workflow_checkpoints
    referencing new table as added for each statement
    execute function memory_private.memory_bounds_count('checkpoints_per_user', 'keep_newest');
-- The user's oldest checkpoints, when the count passes the limit.
create index workflow_checkpoints_user_idx on memory_private.workflow_checkpoints (user_id, id);
