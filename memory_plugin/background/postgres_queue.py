"""`PostgresJobQueue`: extraction jobs in `public.memory_jobs`, shared by every worker process of the
database (claimed with `FOR UPDATE SKIP LOCKED`, leased, retried with backoff; see the migration
`supabase/migrations/20261124020000_memory_jobs.sql`).

Every statement switches to the `memory_worker` role first (transaction-local, like the store's per-user
prelude): the queue functions are executable by that role only, never by `authenticated` or `anon`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ..database.calls import postgres_errors, run_after_prelude
from ..database.pooler import PoolerMode, connection_kwargs
from ..database.reach import open_pool
from ..models import Message
from ..privacy import redact_sensitive
from .jobs import EnqueueOutcome, ExtractionJob, QueueStatus, redacted_messages

__all__ = ["PostgresJobQueue"]

WORKER_PRELUDE_SQL = "select set_config('role', 'memory_worker', true)"
ENQUEUE_SQL = "select * from memory_private.memory_jobs_enqueue(%s, %s, %s::jsonb, %s, %s, %s, %s)"
CLAIM_SQL = "select * from memory_private.memory_jobs_claim(%s, %s, %s::real)"
EXTEND_SQL = "select memory_private.memory_jobs_extend(%s, %s, %s::real) as ok"
HOLD_SQL = "select forgotten from memory_private.memory_jobs_hold(%s, %s)"
COMPLETE_SQL = "select memory_private.memory_jobs_complete(%s, %s) as ok"
FAIL_SQL = "select memory_private.memory_jobs_fail(%s, %s, %s, %s::real, %s) as ok"
RELEASE_SQL = "select memory_private.memory_jobs_release(%s, %s) as ok"
FORGET_SQL = "select memory_private.memory_jobs_forget(%s, %s::jsonb) as marked"
UNSETTLED_SQL = "select id from memory_private.memory_jobs_unsettled(%s::bigint[]) as id"
RETRY_DEAD_SQL = "select memory_private.memory_jobs_retry_dead(%s::uuid) as revived"
STATUS_SQL = "select * from memory_private.memory_jobs_status()"
PROMOTE_SQL = "select memory_private.memory_jobs_promote(null, %s, %s) as promoted"
PROMOTE_EVERY_SECONDS = 1.0
"""Deferred jobs are made due at most once a second per queue: a poll finds none in one probe of a partial index,
and a user's backlog waits for that user's own jobs to run (seconds each), so a second adds nothing."""


@dataclass(slots=True)
class _Hold:
    forgotten: Sequence[str] | None


def job_from_row(row: dict[str, Any]) -> ExtractionJob:
    """An `ExtractionJob` from a `memory_jobs` row."""
    payload = row["payload"]
    return ExtractionJob(
        id=int(row["id"]),
        user_id=row["user_id"],
        session_id=row["session_id"],
        messages=[Message.model_validate(m) for m in payload.get("messages", [])],
        write_id=row["write_id"],
        trigger=str(payload.get("trigger", "cadence")),
        attempts=int(row["attempts"]),
        forgotten=[str(c) for c in payload.get("forgotten", [])],
    )


class PostgresJobQueue:
    """The durable queue on the pool it is given (the manager's one pool, `runtime/assembly.py`) or, through
    `connect`, on a small pool of its own (the API and tools that open only a queue)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]],
        *,
        max_pending: int,
        max_messages: int,
        max_pending_per_user: int = 100,
        owns_pool: bool = False,
    ) -> None:
        self._pool = pool
        self._owns_pool = owns_pool
        """True when `close` closes the pool (the one `connect` opened); a pool handed in is its giver's."""
        self.max_pending = max_pending
        self.max_messages = max_messages
        self.max_pending_per_user = max_pending_per_user
        self.promote_every_seconds = PROMOTE_EVERY_SECONDS
        """How often `claim` makes deferred jobs due (at most)."""
        self._promoted_at = -PROMOTE_EVERY_SECONDS

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        max_pending: int,
        max_messages: int,
        max_pending_per_user: int = 100,
        max_size: int = 4,
        connect_timeout: float = 5.0,
        pooler: PoolerMode = "auto",
    ) -> PostgresJobQueue:
        """Open the queue's pool on `url` (the store's database; `pooler`: see `database.pooler`)."""
        pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            timeout=connect_timeout,
            open=False,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": max(1, round(connect_timeout)),
                **connection_kwargs(url, pooler),
            },
            name="memory_plugin-queue",
        )
        await open_pool(pool, url, seconds=connect_timeout, what="the job queue ")
        return cls(
            pool,
            max_pending=max_pending,
            max_messages=max_messages,
            max_pending_per_user=max_pending_per_user,
            owns_pool=True,
        )

    @property
    def name(self) -> Literal["postgres"]:
        """Always "postgres"."""
        return "postgres"

    async def _run(self, query: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        """One queue statement as `memory_worker`: prelude and statement in one message, one implicit
        transaction (the role switch ends with it)."""
        with postgres_errors("the job queue operation"):
            async with self._pool.connection() as conn:
                rows, _ = await run_after_prelude(conn, WORKER_PRELUDE_SQL, (), query, params)
                return rows

    async def enqueue(
        self, user_id: UUID, session_id: str, messages: Sequence[Message], trigger: str
    ) -> tuple[int | None, EnqueueOutcome]:
        """See `JobQueue.enqueue`. The messages are stored with their secrets redacted (`redacted_messages`)."""
        cleaned = await redacted_messages(messages)
        payload = json.dumps([m.model_dump(mode="json") for m in cleaned], ensure_ascii=False)
        [row] = await self._run(
            ENQUEUE_SQL,
            (user_id, session_id, payload, trigger, self.max_pending, self.max_messages, self.max_pending_per_user),
        )
        outcome: EnqueueOutcome = row["outcome"]
        return (None if row["job_id"] is None else int(row["job_id"])), outcome

    async def claim(self, worker: str, limit: int, lease_seconds: float) -> list[ExtractionJob]:
        """See `JobQueue.claim`. Deferred jobs of users below their limit become due first."""
        now = time.monotonic()
        if now - self._promoted_at >= self.promote_every_seconds:
            self._promoted_at = now
            await self._run(PROMOTE_SQL, (self.max_pending, self.max_pending_per_user))
        return [job_from_row(r) for r in await self._run(CLAIM_SQL, (worker, limit, lease_seconds))]

    async def extend(self, job: ExtractionJob, worker: str, lease_seconds: float) -> bool:
        """See `JobQueue.extend`."""
        [row] = await self._run(EXTEND_SQL, (job.id, worker, lease_seconds))
        return bool(row["ok"])

    @asynccontextmanager
    async def hold(self, job: ExtractionJob, worker: str) -> AsyncIterator[_Hold]:
        """See `JobQueue.hold`: one transaction holding the job's row `FOR SHARE` from before the write to its
        completion, so an erase or a forget of the user waits for the write (and then removes what it wrote)
        or, when first, makes the job see that it must not write."""
        with postgres_errors("the job queue operation"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(WORKER_PRELUDE_SQL)
                rows = await (await conn.execute(HOLD_SQL, (job.id, worker))).fetchall()
                forgotten = [str(c) for c in rows[0]["forgotten"]] if rows else None
                yield _Hold(forgotten)
                if rows:
                    await conn.execute(COMPLETE_SQL, (job.id, worker))

    async def fail(self, job: ExtractionJob, worker: str, error: str, *, delay_seconds: float, dead: bool) -> None:
        """See `JobQueue.fail`. The error is stored with its secrets redacted (a model's error may quote a message)."""
        await self._run(FAIL_SQL, (job.id, worker, redact_sensitive(error[:2000]).text, delay_seconds, dead))

    async def release(self, job: ExtractionJob, worker: str) -> None:
        """See `JobQueue.release`."""
        await self._run(RELEASE_SQL, (job.id, worker))

    async def forget(self, user_id: UUID, contents: Sequence[str]) -> int:
        """See `JobQueue.forget`."""
        [row] = await self._run(FORGET_SQL, (user_id, json.dumps(list(contents), ensure_ascii=False)))
        return int(row["marked"])

    async def unsettled(self, job_ids: Sequence[int]) -> set[int]:
        """See `JobQueue.unsettled`."""
        if not job_ids:
            return set()
        return {int(r["id"]) for r in await self._run(UNSETTLED_SQL, (list(job_ids),))}

    async def retry_dead(self, user_id: UUID | None = None) -> int:
        """See `JobQueue.retry_dead`."""
        [row] = await self._run(RETRY_DEAD_SQL, (user_id,))
        return int(row["revived"])

    async def status(self) -> QueueStatus:
        """See `JobQueue.status`."""
        [row] = await self._run(STATUS_SQL, ())
        return QueueStatus(
            backend="postgres",
            pending=int(row["pending"]),
            running=int(row["running"]),
            retrying=int(row["retrying"]),
            dead=int(row["dead"]),
            failed_attempts=int(row["failed_attempts"]),
            oldest_pending_at=row["oldest_pending_at"],
            deferred=int(row["deferred"]),
        )

    async def close(self) -> None:
        """Close the pool if the queue opened it; queued jobs stay in the table."""
        if self._owns_pool:
            await self._pool.close()
