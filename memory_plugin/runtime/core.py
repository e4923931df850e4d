"""`FacadeCore`: the state every part of the `MemoryManager` facade shares (its services, set by
`MemoryManager.__init__`), the checks they share, the counters, and the work off the request path
(delegated to `supervisor.py`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..background import BackgroundWorker, JobQueue, QueueStatus
from ..background.jobs import ExtractionJob
from ..consent import ConsentStore
from ..context.reader import ContextReader
from ..embeddings import MemoryEmbedder
from ..errors import ManagerClosedError, MemoryPausedError, MemoryPluginError
from ..extraction import FactExtractor
from ..extraction.policy import ExtractionPolicy
from ..extraction.runner import ExtractionRunner, ScheduledExtraction
from ..failures import StoreFailures
from ..formatting import MemoryFormat
from ..retrieval.searcher import Searcher
from ..session import SessionBackend, SessionCalls
from ..settings import MemorySettings
from ..stats import MemoryStats
from ..store import LongTermStore
from ..validation import (
    check_session_id,
    parse_user_id,
)
from ..write.pipeline import WritePipeline
from .assembly import Assembly
from .connector import DatabaseConnector
from .supervisor import Supervisor

if TYPE_CHECKING:
    from ..context.builder import ContextBuilder


__all__ = ["FacadeCore"]


class FacadeCore:
    """The shared state and checks of the facade (see the module docstring); not used on its own."""

    settings: MemorySettings
    store: LongTermStore
    embedder: MemoryEmbedder | None
    _sessions: SessionBackend
    _session_calls: SessionCalls
    _failures: StoreFailures
    _searcher: Searcher
    _context_reader: ContextReader
    _writer: WritePipeline
    _extraction: ExtractionRunner
    _consent: ConsentStore
    _format: MemoryFormat
    _closed: bool
    _messages_added: int
    _exchanges_not_recorded: int
    _valid_session_ids: set[str]
    _supervisor: Supervisor
    _database_url: str | None
    _connector: DatabaseConnector | None
    _assembly: Assembly | None
    _context: ContextBuilder | None
    _context_lock: asyncio.Lock

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("this MemoryManager is closed; open a new one with MemoryManager.open()")

    @property
    def closed(self) -> bool:
        """Whether `close` was called: every memory operation then raises `ManagerClosedError`."""
        return self._closed

    @property
    def extractor(self) -> FactExtractor:
        """The fact extractor (a model, or the offline rules)."""
        return self._extraction.extractor

    @property
    def policy(self) -> ExtractionPolicy:
        """When extraction runs (triggers, cadence)."""
        return self._extraction.policy

    def extracts_inline(self, choice: bool | None = None) -> bool:
        """Whether an extraction runs before a turn returns (True) or is queued for the background worker:
        `choice` when given (a capability's or workflow's `extract_inline`), else the settings'
        (`not background_extraction`: queued by default)."""
        return choice if choice is not None else not self.settings.background_extraction

    @property
    def jobs_write_summaries(self) -> bool:
        """Whether a queued extraction job also writes a due rolling summary in its own model call (an extractor
        that writes summaries and a summary host: `ExtractionRunner.writes_summaries`)."""
        return self._extraction.writes_summaries

    @property
    def stats(self) -> MemoryStats:
        """Counters since the manager opened (a snapshot: read it again after more calls)."""
        return MemoryStats.collect(
            self._writer.stats,
            self._writer.admission.stats,
            self._extraction.stats,
            self._searcher.stats,
            self._failures,
            _Messages(self._messages_added, self._exchanges_not_recorded),
        )

    # --- background extraction (docs/background.md): the supervisor's (runtime/supervisor.py) ---------------------
    async def _run_job(self, job: ExtractionJob, queue: JobQueue, worker: str) -> None:
        """A queued extraction, unless its user paused memory since it was queued (then it is done, unwritten)."""
        if await self._consent.paused(job.user_id):
            async with queue.hold(job, worker):
                pass  # a clean exit completes (removes) the job: left leased, it would run again at every lease end
            return
        if self._context is None and self._context_lock.locked():
            # This manager's context builder is being opened (a worker opens it right after the manager, whose
            # worker starts at once): wait, so that it follows this job and a due summary is written in the
            # job's own call. Without the wait, the jobs leased in between ran without the summary.
            async with self._context_lock:
                pass
        await self._extraction.run_job(job, queue, worker)

    def _background(self) -> tuple[JobQueue, BackgroundWorker | None]:
        return self._supervisor.background()

    async def schedule_extraction(
        self, session_id: str, user_id: str | UUID, *, end_of_request: bool = False
    ) -> ScheduledExtraction:
        """Queue one batched extraction if the extraction policy says so (as `extract_if_due` decides), and
        return at once: a background worker extracts and stores the facts. Until it has, the next turn does
        not see them (`flush()` waits for it; docs/background.md). When the queue is full the messages stay
        pending in the session for its next trigger (`outcome == "full"`); a user at their limit of waiting jobs has
        them deferred in their backlog (`outcome == "deferred"`)."""
        self._check_open()
        uid = parse_user_id(user_id)
        if await self._consent.paused(uid):
            return ScheduledExtraction()
        queue, _ = self._background()
        scheduled = await self._extraction.schedule(
            queue, check_session_id(session_id), uid, end_of_request=end_of_request
        )
        if scheduled.job_id is not None:
            self._supervisor.queued(scheduled.job_id)
        return scheduled

    async def flush(self, timeout: float = 30.0) -> bool:  # noqa: ASYNC109 - a deadline is the point of flush
        """Wait until the background work this manager queued so far is done, at most `timeout` seconds;
        returns whether it all is. Facts extracted in the background become visible to reads only once
        written: call this to close that window (scripts, tests, before exiting). A job that failed and waits
        for its retry does not hold `flush` (it counts in `backend_status().queue.retrying`). With
        `background_worker=False` another process runs the jobs; `flush` waits for it all the same."""
        self._check_open()
        return await self._supervisor.flush(timeout)

    def run_in_background(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run `work` off the request path in this process, for derived memory the next turn or a resync
        rebuilds if it is lost (the context's slots and rolling summary): not durable, unlike extraction jobs.
        `flush` waits for it, `close` too (then cancels what is left after its deadline); a
        `MemoryPluginError` it raises is logged, never lost silently."""
        self._check_open()
        self._supervisor.run_in_background(work, name=name)

    async def queue_status(self) -> QueueStatus:
        """The background extraction queue now: depth, oldest pending job, failures, retries, dead jobs."""
        self._check_open()
        queue, _ = self._background()
        status = await queue.status()
        return dataclasses.replace(status, refused=self._extraction.jobs_refused)

    async def retry_dead_jobs(self, user_id: str | UUID | None = None) -> int:
        """Queue the dead background jobs again (all, or the user's), with fresh attempts; returns how many."""
        self._check_open()
        queue, worker = self._background()
        revived = await queue.retry_dead(parse_user_id(user_id) if user_id is not None else None)
        if worker is not None:
            worker.notify()
        return revived

    @property
    def database_url(self) -> str | None:
        """The Postgres in use (open it with `psql`), or None for a non-Postgres store (and, for the
        embedded default, until its server has started)."""
        if self._connector is not None:
            return self._connector.url
        return self._database_url

    def _postgres_url(self, what: str) -> str:
        if self.database_url is None:
            raise MemoryPluginError(f"{what} needs the Postgres backend (a manager opened without store=)")
        return self.database_url

    async def _check_not_paused(self, user_id: UUID) -> None:
        # With a database the write's own statement refuses it (StorePausedError): no read first.
        if not self._consent.enforced_by_database and await self._consent.paused(user_id):
            raise MemoryPausedError(f"user {user_id} paused their memory: nothing is stored until they resume it")


class _Messages:
    """The manager's own counter, in the shape `MemoryStats.collect` reads."""

    __slots__ = ("exchanges_not_recorded", "messages_added")

    def __init__(self, messages_added: int, exchanges_not_recorded: int) -> None:
        self.messages_added = messages_added
        self.exchanges_not_recorded = exchanges_not_recorded
