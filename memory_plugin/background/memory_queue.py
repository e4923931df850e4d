"""`InProcessJobQueue`: the bounded job queue of stores without Postgres (in-memory, Supabase over HTTP).

Not durable: jobs live in this process's RAM and are lost when it exits (the session's messages they carry
were in RAM too). Bounded by `max_pending` waiting jobs, each holding at most a session window of messages.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal
from uuid import UUID

from ..models import Message
from .jobs import EnqueueOutcome, ExtractionJob, QueueStatus

__all__ = ["InProcessJobQueue"]

_State = Literal["pending", "retry", "running", "dead", "deferred"]


@dataclass(slots=True)
class _Entry:
    job: ExtractionJob
    state: _State = "pending"
    run_after: float = 0.0
    leased_by: str | None = None
    leased_until: float = 0.0
    last_error: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(slots=True)
class _Hold:
    forgotten: Sequence[str] | None


class InProcessJobQueue:
    """Jobs in a dict, in order of arrival; the same rules as the Postgres queue (coalescing, one job per
    session at a time, leases, backoff, dead jobs)."""

    def __init__(self, *, max_pending: int, max_messages: int, max_pending_per_user: int = 100) -> None:
        self.max_pending = max_pending
        self.max_messages = max_messages
        self.max_pending_per_user = max_pending_per_user
        self._entries: dict[int, _Entry] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        """Held by a job's write and by `forget`: a forget waits for a write in progress, or the write sees it."""

    @property
    def name(self) -> Literal["in-process"]:
        """Always "in-process"."""
        return "in-process"

    async def enqueue(
        self, user_id: UUID, session_id: str, messages: Sequence[Message], trigger: str
    ) -> tuple[int | None, EnqueueOutcome]:
        """See `JobQueue.enqueue`."""
        for entry in self._entries.values():
            job = entry.job
            if entry.state == "pending" and job.user_id == user_id and job.session_id == session_id:
                job.messages = [*job.messages, *messages][-self.max_messages :]
                job.trigger = trigger
                return job.id, "coalesced"
        over = self._over(user_id)
        # Over the limit the messages wait in the user's backlog (one deferred job per session, never claimed),
        # as in the Postgres queue: made pending by `claim` once the user's waiting jobs fall below the limit.
        for entry in self._entries.values():
            job = entry.job
            if entry.state == "deferred" and job.user_id == user_id and job.session_id == session_id:
                job.messages = [*job.messages, *messages][-self.max_messages :]
                job.trigger = trigger
                entry.state = "deferred" if over else "pending"
                return job.id, "deferred" if over else "queued"
        state: _State = "pending"
        if over:
            deferred = sum(e.state == "deferred" and e.job.user_id == user_id for e in self._entries.values())
            if deferred >= 10 * self.max_pending_per_user:
                return None, "full"
            state = "deferred"
        job_id = next(self._ids)
        self._entries[job_id] = _Entry(
            ExtractionJob(job_id, user_id, session_id, list(messages)[-self.max_messages :], uuid.uuid4(), trigger),
            state=state,
        )
        return job_id, "deferred" if over else "queued"

    def _over(self, user_id: UUID) -> bool:
        """Whether a new waiting job of the user is over a limit (fair, as the Postgres queue: the whole queue's
        limit counts only against users already holding a waiting job)."""
        waiting = [e.job.user_id for e in self._entries.values() if e.state in ("pending", "retry")]
        mine = waiting.count(user_id)
        return mine >= self.max_pending_per_user or (mine > 0 and len(waiting) >= self.max_pending)

    def _promote(self) -> None:
        """Deferred jobs of users no longer over their limit become pending, oldest first (counted once per
        claim, not once per deferred job)."""
        deferred = [e for e in self._entries.values() if e.state == "deferred"]
        if not deferred:
            return
        waiting = Counter(e.job.user_id for e in self._entries.values() if e.state in ("pending", "retry"))
        total = sum(waiting.values())
        for entry in deferred:
            mine = waiting[entry.job.user_id]
            if mine < self.max_pending_per_user and (mine == 0 or total < self.max_pending):
                entry.state, entry.run_after = "pending", 0.0
                waiting[entry.job.user_id] += 1
                total += 1

    async def claim(self, worker: str, limit: int, lease_seconds: float) -> list[ExtractionJob]:
        """See `JobQueue.claim`."""
        self._promote()
        now = time.monotonic()
        blocked: set[tuple[UUID, str]] = set()
        claimed: list[ExtractionJob] = []
        for entry in list(self._entries.values()):  # in id order: a session's oldest job first
            key = (entry.job.user_id, entry.job.session_id)
            if entry.state in ("dead", "deferred") or key in blocked:
                continue
            blocked.add(key)
            due = entry.state in ("pending", "retry") and entry.run_after <= now
            expired = entry.state == "running" and entry.leased_until < now
            if (due or expired) and len(claimed) < limit:
                entry.state, entry.leased_by, entry.leased_until = "running", worker, now + lease_seconds
                entry.job.attempts += 1
                claimed.append(entry.job)
        return claimed

    async def extend(self, job: ExtractionJob, worker: str, lease_seconds: float) -> bool:
        """See `JobQueue.extend`."""
        entry = self._leased(job, worker)
        if entry is None:
            return False
        entry.leased_until = time.monotonic() + lease_seconds
        return True

    @asynccontextmanager
    async def hold(self, job: ExtractionJob, worker: str) -> AsyncIterator[_Hold]:
        """See `JobQueue.hold`."""
        async with self._lock:
            entry = self._leased(job, worker)
            yield _Hold(None if entry is None else list(entry.job.forgotten))
            if entry is not None and self._leased(job, worker) is entry:
                del self._entries[job.id]

    async def fail(self, job: ExtractionJob, worker: str, error: str, *, delay_seconds: float, dead: bool) -> None:
        """See `JobQueue.fail`."""
        entry = self._leased(job, worker)
        if entry is not None:
            entry.state = "dead" if dead else "retry"
            entry.run_after = time.monotonic() + delay_seconds
            entry.leased_by, entry.last_error = None, error[:2000]

    async def release(self, job: ExtractionJob, worker: str) -> None:
        """See `JobQueue.release`."""
        entry = self._leased(job, worker)
        if entry is not None:
            entry.state, entry.run_after, entry.leased_by = "retry", 0.0, None
            job.attempts = max(job.attempts - 1, 0)

    async def forget(self, user_id: UUID, contents: Sequence[str]) -> int:
        """See `JobQueue.forget`."""
        async with self._lock:
            marked = [e.job for e in self._entries.values() if e.job.user_id == user_id]
            for job in marked:
                job.forgotten.extend(contents)
            return len(marked)

    async def unsettled(self, job_ids: Sequence[int]) -> set[int]:
        """See `JobQueue.unsettled`."""
        return {i for i in job_ids if (e := self._entries.get(i)) is not None and e.state in ("pending", "running")}

    async def retry_dead(self, user_id: UUID | None = None) -> int:
        """See `JobQueue.retry_dead`."""
        revived = 0
        for entry in self._entries.values():
            if entry.state == "dead" and (user_id is None or entry.job.user_id == user_id):
                entry.state, entry.run_after, entry.job.attempts = "retry", 0.0, 0
                revived += 1
        return revived

    async def status(self) -> QueueStatus:
        """See `JobQueue.status`."""
        entries = list(self._entries.values())
        unfinished = [e.created_at for e in entries if e.state != "dead"]
        return QueueStatus(
            backend="in-process",
            pending=sum(e.state == "pending" for e in entries),
            running=sum(e.state == "running" for e in entries),
            retrying=sum(e.state == "retry" for e in entries),
            dead=sum(e.state == "dead" for e in entries),
            failed_attempts=sum(e.job.attempts for e in entries if e.last_error is not None),
            oldest_pending_at=min(unfinished, default=None),
            deferred=sum(e.state == "deferred" for e in entries),
        )

    async def close(self) -> None:
        """Nothing to release; jobs still queued are lost with the process (not durable)."""

    def _leased(self, job: ExtractionJob, worker: str) -> _Entry | None:
        entry = self._entries.get(job.id)
        if entry is None or entry.state != "running" or entry.leased_by != worker:
            return None
        return entry
