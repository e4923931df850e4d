"""Retention by age of workflow checkpoints (`MEMORY_RETENTION_CHECKPOINT_DAYS`, sooner than the raw-data months)
and context receipts (`MEMORY_RETENTION_RECEIPT_DAYS`): what is past its age goes, a second run removes nothing,
a row a writer holds is skipped, and rows written during a run all stay."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg

from memory_plugin.retention import RetentionPolicy, apply_retention
from memory_plugin.settings import MemorySettings

Conn = psycopg.Connection[tuple[Any, ...]]
TABLES = ("memory_private.workflow_checkpoints", "memory_private.memory_receipts")


def add(conn: Conn, user: UUID, days_old: float, tag: str) -> None:
    """A checkpoint and a receipt of `user`, written `days_old` days ago."""
    at = datetime.now(UTC) - timedelta(days=days_old)
    conn.execute(
        "insert into memory_private.workflow_checkpoints (user_id, session_id, step, state, created_at)"
        " values (%s, 's', %s, '{}', %s)",
        (user, tag, at),
    )
    conn.execute(
        "insert into memory_private.memory_receipts (user_id, session_id, receipt, created_at)"
        " values (%s, %s, '{}', %s)",
        (user, tag, at),
    )


def tags(conn: Conn, user: UUID) -> dict[str, set[str]]:
    queries = {
        "checkpoints": "select step from memory_private.workflow_checkpoints where user_id = %s",
        "receipts": "select session_id from memory_private.memory_receipts where user_id = %s",
    }
    return {name: {r[0] for r in conn.execute(query, (user,))} for name, query in queries.items()}


def test_the_ages_come_from_the_settings() -> None:
    policy = RetentionPolicy.from_settings(MemorySettings(retention_checkpoint_days=7, retention_receipt_days=2))
    assert (policy.checkpoint_days, policy.receipt_days) == (7, 2)
    now = datetime.now(UTC)
    assert policy.checkpoint_cutoff(now) == now - timedelta(days=7)
    # The raw-data age still applies when it is the sooner one, and 0 leaves only the other.
    assert RetentionPolicy(raw_months=0.1, checkpoint_days=30).checkpoint_cutoff(now) > now - timedelta(days=4)
    assert RetentionPolicy(raw_months=0, checkpoint_days=0).checkpoint_cutoff(now) is None


async def test_checkpoints_and_receipts_past_their_age_go_and_a_second_run_removes_nothing(
    admin_conn: Conn, database_url: str
) -> None:
    user = uuid4()
    for days, tag in ((400, "year"), (45, "weeks"), (20, "days"), (0, "now")):
        add(admin_conn, user, days, tag)
    policy = RetentionPolicy()  # checkpoints 30 days, receipts 90 days, raw data 12 months
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        first = await apply_retention(conn, policy)
        second = await apply_retention(conn, policy)
    assert tags(admin_conn, user) == {"checkpoints": {"days", "now"}, "receipts": {"weeks", "days", "now"}}
    assert first.removed["memory_private.workflow_checkpoints"] >= 2
    assert first.removed["memory_private.memory_receipts"] >= 1
    assert second.total == 0, second.describe()
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await apply_retention(conn, RetentionPolicy(checkpoint_days=7, receipt_days=7))
    assert tags(admin_conn, user) == {"checkpoints": {"now"}, "receipts": {"now"}}


async def test_a_run_concurrent_with_writers_skips_held_rows_and_keeps_new_ones(
    admin_conn: Conn, database_url: str
) -> None:
    user = uuid4()
    add(admin_conn, user, 60, "held")
    add(admin_conn, user, 200, "old")
    policy = RetentionPolicy(checkpoint_days=30, receipt_days=30)
    async with await psycopg.AsyncConnection.connect(database_url) as writer:
        # A writer holds the old rows (as a delete in progress would): retention skips them, never waits.
        for table in TABLES:
            await writer.execute(
                f"select 1 from {table} where user_id = %s and created_at < now() - interval '50 days'"
                " and created_at > now() - interval '100 days' for update",
                (user,),
            )
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            stop = asyncio.Event()

            async def retention_loop() -> int:
                runs = 0
                while not stop.is_set():
                    await apply_retention(conn, policy)
                    runs += 1
                return runs

            loop = asyncio.create_task(retention_loop())
            for n in range(12):
                await asyncio.to_thread(add, admin_conn, user, 0, f"new-{n}")
                await asyncio.sleep(0.01)
            stop.set()
            assert await loop >= 1
        assert tags(admin_conn, user) == {
            "checkpoints": {"held", *(f"new-{n}" for n in range(12))},
            "receipts": {"held", *(f"new-{n}" for n in range(12))},
        }
        await writer.rollback()
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await apply_retention(conn, policy)
    assert tags(admin_conn, user) == {
        "checkpoints": {f"new-{n}" for n in range(12)},
        "receipts": {f"new-{n}" for n in range(12)},
    }
