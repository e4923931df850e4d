"""The SQL of `PostgresContextStore` (tables `memory_slots` and `memory_summaries`): the wire format beside the
store, each statement run as the user after the identity prelude (`store.PostgresContextStore._run_all`)."""

from __future__ import annotations

__all__ = [
    "ADD_SUMMARY_SQL",
    "CURRENT_SUMMARIES_SQL",
    "DROP_LATEST_SQL",
    "PATCH_SLOTS_SQL",
    "PRUNE_SESSION_SUMMARIES_SQL",
    "READ_SLOTS_SQL",
    "SUMMARY_COLUMNS",
    "SUMMARY_VERSIONS_SQL",
]

READ_SLOTS_SQL = "select slots from public.memory_slots where user_id = %(user)s"
# Field-level compare-and-set: insert the patched fields, or merge them into the stored document (`||`,
# cleared fields removed with `-`) only if every field the patch changes still holds what the writer read.
# A concurrent writer's row lock makes this one wait, then the WHERE is evaluated on the newest row.
PATCH_SLOTS_SQL = """
insert into public.memory_slots as s (user_id, slots, updated_at)
values (%(user)s, %(new)s::jsonb - array(select e.key from jsonb_each(%(new)s::jsonb) e where e.value = 'null'), now())
on conflict (user_id) do update
set slots = (s.slots || %(new)s::jsonb) - array(select e.key from jsonb_each(%(new)s::jsonb) e where e.value = 'null'),
    updated_at = now()
where not exists (
    select 1 from jsonb_each(%(expected)s::jsonb) e
    where coalesce(s.slots -> e.key, 'null'::jsonb) is distinct from e.value
)
returning 1
"""
SUMMARY_COLUMNS = (
    "scope, version, content, kind, language, message_count, covered_until, resynced_at, covered_from, created_at"
)
SUMMARY_VERSIONS_SQL = (
    f"select {SUMMARY_COLUMNS} from public.memory_summaries where user_id = %(user)s and scope = %(scope)s"
    " order by version desc"
)
CURRENT_SUMMARIES_SQL = (
    f"select distinct on (scope) {SUMMARY_COLUMNS} from public.memory_summaries"
    " where user_id = %(user)s and scope = any(%(scopes)s) order by scope, version desc"
)
# One statement: the next version, and the versions beyond the newest kept ones deleted.
ADD_SUMMARY_SQL = f"""
with added as (
    insert into public.memory_summaries
        (user_id, scope, version, content, kind, language, message_count, covered_until, resynced_at, covered_from)
    select %(user)s, %(scope)s, coalesce(max(version), 0) + 1, %(content)s, %(kind)s, %(language)s, %(count)s,
        %(covered)s, %(resynced)s, %(covered_from)s
    from public.memory_summaries where user_id = %(user)s and scope = %(scope)s
    returning {SUMMARY_COLUMNS}
), pruned as (
    delete from public.memory_summaries m using added
    where m.user_id = %(user)s and m.scope = %(scope)s and m.version <= added.version - %(kept)s
)
select * from added
"""
# The same version stored under a second scope (the user's copy of a session summary) in the message that stores it.
COPY_SUMMARY_SQL = ADD_SUMMARY_SQL.replace("%(scope)s", "%(copy_scope)s").replace(
    "%(covered_from)s", "null::timestamptz"
)
# The user's session summaries past the newest kept sessions or the age limit (one grouped scan of their rows).
PRUNE_SESSION_SUMMARIES_SQL = """
delete from public.memory_summaries m using (
    select scope from (
        select scope, max(created_at) as last_at, row_number() over (order by max(created_at) desc) as n
        from public.memory_summaries
        where user_id = %(user)s and scope like 'session:%%' and scope <> %(scope)s
        group by scope
    ) s where s.n > %(keep)s or s.last_at < now() - make_interval(days => %(days)s)
) old
where m.user_id = %(user)s and m.scope = old.scope
"""
DROP_LATEST_SQL = """
delete from public.memory_summaries where user_id = %(user)s and scope = %(scope)s
and version = (select max(version) from public.memory_summaries where user_id = %(user)s and scope = %(scope)s)
"""
