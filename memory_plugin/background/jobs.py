"""What the background queue holds and reports: an extraction job, the outcome of enqueueing one, the
queue's state, and the `JobQueue` contract both queues (Postgres, in-process) implement."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol
from uuid import UUID

from ..models import Message
from ..privacy import redact_sensitive, run_filter

__all__ = ["EnqueueOutcome", "ExtractionJob", "JobHold", "JobQueue", "QueueStatus", "redacted_messages"]

EnqueueOutcome = Literal["queued", "coalesced", "deferred", "full"]
"""`queued`: a new job; `coalesced`: added to the session's pending job; `deferred`: the user holds
`background_max_pending_jobs_per_user` waiting jobs (or the queue `background_max_pending_jobs` and the user one):
the messages wait in the user's backlog, a deferred job of the session that becomes due once the user's waiting
jobs fall below the limit (durable in Postgres: they outlive the session); `full`: refused (the user's backlog
is full too, 10 × the per-user limit of sessions), the caller keeps the messages pending."""


async def redacted_messages(messages: Sequence[Message]) -> list[Message]:
    """`messages` with the secrets the privacy filter finds (cards, IBANs, national ids, passwords, API keys)
    replaced by `[redacted <kind>]`, as in stored notes: what a job may hold at rest, while it waits or once
    dead. Health statements are kept: extraction must see them to reduce them to a non-clinical fact or drop
    them (the fact filter runs on what it extracts)."""
    cleaned: list[Message] = []
    for message in messages:
        redaction = await run_filter(redact_sensitive, message.content)
        cleaned.append(message if not redaction.kinds else message.model_copy(update={"content": redaction.text}))
    return cleaned


@dataclass(slots=True)
class ExtractionJob:
    """Extract facts from `messages` and write them for `user_id`, once (`write_id`)."""

    id: int
    user_id: UUID
    session_id: str
    messages: list[Message]
    write_id: UUID
    trigger: str = "cadence"
    attempts: int = 0
    """Attempts so far, this one included."""
    forgotten: list[str] = field(default_factory=list)
    """Contents of the user's memories forgotten since the job was queued: matching facts are not written."""


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """The queue as it is now (`MemoryManager.backend_status().queue`, `memory-plugin status`)."""

    backend: Literal["postgres", "in-process"]
    """Where jobs wait: durable in Postgres, or in this process's RAM (lost when it exits)."""
    pending: int
    """Jobs waiting to run for the first time."""
    running: int
    """Jobs leased to a worker now."""
    retrying: int
    """Jobs that failed and wait for their retry (exponential backoff)."""
    dead: int
    """Jobs that failed `background_max_attempts` times: kept and shown; `memory-plugin worker --retry-dead`
    runs them again."""
    failed_attempts: int
    """Failed attempts of the jobs still in the queue."""
    oldest_pending_at: datetime | None
    """When the oldest unfinished job was queued (None when none is)."""
    refused: int = 0
    """Triggers refused by a full queue since this process started (their messages stayed in the session)."""
    deferred: int = 0
    """Deferred jobs: messages of users at their limit of waiting jobs, kept until the user's jobs fall below it."""

    @property
    def depth(self) -> int:
        """Unfinished jobs (pending, running, retrying)."""
        return self.pending + self.running + self.retrying

    def oldest_pending_age(self, now: datetime) -> float | None:
        """Seconds the oldest unfinished job has waited, at `now`."""
        return None if self.oldest_pending_at is None else max(0.0, (now - self.oldest_pending_at).total_seconds())


class JobHold(Protocol):
    """A claimed job, held while its write is made: `forgotten` is read under the hold, and the job is
    completed with it (Postgres: one transaction, so an erase or a forget waits for the write)."""

    forgotten: Sequence[str] | None
    """Contents forgotten since the job was queued; None when the job must not be applied (erased, cancelled,
    or claimed again by another worker after this one lost its lease)."""


class JobQueue(Protocol):
    """Where extraction jobs wait, shared by the workers that drain it."""

    @property
    def name(self) -> Literal["postgres", "in-process"]:
        """ "postgres" (durable, shared by processes) or "in-process" (RAM, this process only)."""
        ...

    async def enqueue(
        self, user_id: UUID, session_id: str, messages: Sequence[Message], trigger: str
    ) -> tuple[int | None, EnqueueOutcome]:
        """Queue a job, or add the messages to the session's pending job; (job id, outcome)."""
        ...

    async def claim(self, worker: str, limit: int, lease_seconds: float) -> list[ExtractionJob]:
        """Up to `limit` due jobs, leased to `worker` (one per session, oldest first)."""
        ...

    async def extend(self, job: ExtractionJob, worker: str, lease_seconds: float) -> bool:
        """Keep the lease of a job still running; False when it was lost."""
        ...

    def hold(self, job: ExtractionJob, worker: str) -> AbstractAsyncContextManager[JobHold]:
        """Hold the job while its facts are written; on a clean exit the job is complete (removed)."""
        ...

    async def fail(self, job: ExtractionJob, worker: str, error: str, *, delay_seconds: float, dead: bool) -> None:
        """A failed attempt: due again after `delay_seconds`, or dead."""
        ...

    async def release(self, job: ExtractionJob, worker: str) -> None:
        """Give back a claimed job not run (a closing worker): due now, the attempt not counted."""
        ...

    async def forget(self, user_id: UUID, contents: Sequence[str]) -> int:
        """The user forgot memories with these contents: unfinished jobs will not write matching facts."""
        ...

    async def unsettled(self, job_ids: Sequence[int]) -> set[int]:
        """Which of these jobs are still pending or running."""
        ...

    async def retry_dead(self, user_id: UUID | None = None) -> int:
        """Dead jobs due again (all, or the user's); returns how many."""
        ...

    async def status(self) -> QueueStatus:
        """Depth, oldest pending, failures, retries, dead jobs."""
        ...

    async def close(self) -> None:
        """Release connections (queued jobs stay in a durable queue)."""
        ...
