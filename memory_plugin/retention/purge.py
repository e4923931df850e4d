"""`apply_retention`: delete what the retention policy says is past its time, for every user, on an
administrative connection.

Safe to run from cron while applications write: each step is its own short transaction; a row is past the
policy only by a timestamp older than the cutoff, which a row being written now never has; rows locked by a
writer are skipped (`skip locked`) and, for chats, the age is checked again once the row is locked (a chat
appended to meanwhile is newer and kept). Idempotent: a second run finds nothing more.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg

from ..database.calls import postgres_errors
from ..logs import LOG_PREFIX, logger
from .policy import RetentionPolicy, RetentionReport

__all__ = ["apply_retention"]

CHATS_SQL = """
with due as (
    select id from public.chats
     where last_activity_at < %(cutoff)s and (full_history <> '[]'::jsonb or assistant_history <> '[]'::jsonb)
     for update skip locked
)
update public.chats c set full_history = '[]'::jsonb, assistant_history = '[]'::jsonb
  from due where c.id = due.id and c.last_activity_at < %(cutoff)s
"""
CONVERSATIONS_SQL = """
with due as (
    select user_id, conversation_id from public.conversations where updated_at < %(cutoff)s for update skip locked
)
delete from public.conversations c using due
 where c.user_id = due.user_id and c.conversation_id = due.conversation_id and c.updated_at < %(cutoff)s
"""
# An old entry goes unless something kept needs it: a newer entry descending from it, or the head of a
# conversation still stored (and that head's ancestors). Entries form trees through parent_id.
ENTRIES_SQL = """
with recursive kept as (
    select k.user_id, k.id, k.parent_id from (
        select e.user_id, e.id, e.parent_id from public.conversation_entries e where e.created_at >= %(cutoff)s
        union
        select e.user_id, e.id, e.parent_id
          from public.conversations c join public.conversation_entries e on e.user_id = c.user_id and e.id = c.head_id
    ) k
    union
    select p.user_id, p.id, p.parent_id
      from kept k join public.conversation_entries p on p.user_id = k.user_id and p.id = k.parent_id
)
delete from public.conversation_entries e
 where e.created_at < %(cutoff)s
   and not exists (select from kept k where k.user_id = e.user_id and k.id = e.id)
"""
SESSIONS_SQL = """
delete from memory_private.memory_sessions s
 where s.last_active < extract(epoch from %(cutoff)s::timestamptz)
"""
# Checkpoints and receipts are only ever inserted and deleted: a row a writer deletes now (the count bound's
# keep-newest trigger, a user's erase) is skipped, and the age is checked again on the locked row.
CHECKPOINTS_SQL = """
with due as (
    select id from memory_private.workflow_checkpoints where created_at < %(cutoff)s for update skip locked
)
delete from memory_private.workflow_checkpoints c using due where c.id = due.id and c.created_at < %(cutoff)s
"""
RECEIPTS_SQL = """
with due as (
    select user_id, id from memory_private.memory_receipts where created_at < %(cutoff)s for update skip locked
)
delete from memory_private.memory_receipts r using due
 where r.user_id = due.user_id and r.id = due.id and r.created_at < %(cutoff)s
"""
DEAD_JOBS_SQL = """
delete from public.memory_jobs j
 where j.state = 'dead'
   and (j.updated_at < %(cutoff)s
        or j.id in (select d.id from public.memory_jobs d where d.state = 'dead'
                     order by d.updated_at desc, d.id desc offset %(keep)s))
"""
APPLIED_WRITES_SQL = "delete from memory_private.memory_applied_writes where applied_at < %(cutoff)s"
# Memory turn finishes' idempotency keys live 24 hours (a claim prunes its own user's; this, every user's).
TURN_KEYS_SQL = "delete from memory_private.memory_turn_keys where created_at < %(cutoff)s"
TURN_KEY_HOURS = 24


async def _step(
    conn: psycopg.AsyncConnection[Any], report: RetentionReport, table: str, query: str, params: dict[str, Any]
) -> None:
    with postgres_errors(f"applying retention to {table}"):
        async with conn.transaction():
            cursor = await conn.execute(query, params)
    report.removed[table] = report.removed.get(table, 0) + max(cursor.rowcount, 0)


async def apply_retention(
    conn: psycopg.AsyncConnection[Any], policy: RetentionPolicy, *, now: datetime | None = None
) -> RetentionReport:
    """Apply `policy` to every user's rows through `conn` (administrative, autocommit); returns what went."""
    if now is None:
        row = await (await conn.execute("select now()")).fetchone()
        assert row is not None
        now = row[0]
    report = RetentionReport()
    raw = policy.cutoff(now, months=policy.raw_months)
    if raw is not None:
        for table, query in (
            ("public.chats", CHATS_SQL),
            ("public.conversations", CONVERSATIONS_SQL),
            ("public.conversation_entries", ENTRIES_SQL),
            ("memory_private.memory_sessions", SESSIONS_SQL),
        ):
            await _step(conn, report, table, query, {"cutoff": raw})
    checkpoints = policy.checkpoint_cutoff(now)
    if checkpoints is not None:
        await _step(conn, report, "memory_private.workflow_checkpoints", CHECKPOINTS_SQL, {"cutoff": checkpoints})
    receipts = policy.cutoff(now, days=policy.receipt_days)
    if receipts is not None:
        await _step(conn, report, "memory_private.memory_receipts", RECEIPTS_SQL, {"cutoff": receipts})
    dead = policy.cutoff(now, days=policy.dead_job_days) or datetime.min.replace(tzinfo=now.tzinfo)
    keep = policy.max_dead_jobs or 2**62
    await _step(conn, report, "public.memory_jobs", DEAD_JOBS_SQL, {"cutoff": dead, "keep": keep})
    applied = policy.cutoff(now, days=policy.applied_write_days)
    if applied is not None:
        await _step(conn, report, "memory_private.memory_applied_writes", APPLIED_WRITES_SQL, {"cutoff": applied})
    turn_keys = now - timedelta(hours=TURN_KEY_HOURS)
    await _step(conn, report, "memory_private.memory_turn_keys", TURN_KEYS_SQL, {"cutoff": turn_keys})
    logger.info("%s retention removed %s", LOG_PREFIX, report.describe())
    return report
