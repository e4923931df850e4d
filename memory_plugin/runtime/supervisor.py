"""`Supervisor`: a manager's work off the request path. The extraction job queue and the worker that drains it,
the jobs this manager queued (what `flush` waits for), background tasks (slots and summary patches), the
session sweeper, and the order they stop in at close (tasks, then the queue drained, then the sweeper)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..background import BackgroundWorker, JobQueue, open_job_queue
from ..background.jobs import ExtractionJob
from ..background.memory_queue import InProcessJobQueue
from ..background.worker import wait_settled
from ..errors import MemoryPluginError
from ..logs import LOG_PREFIX, logger
from ..session import SessionBackend, session_calls
from ..settings import MemorySettings
from .assembly import SharedPool

__all__ = ["JobRunner", "Supervisor"]

JobRunner = Callable[[ExtractionJob, JobQueue, str], Awaitable[None]]
"""What runs one queued job (the manager's: the extraction, unless the user paused memory)."""


class Supervisor:
    """The background side of one manager (see the module docstring)."""

    def __init__(self, settings: MemorySettings, run_job: JobRunner) -> None:
        self.settings = settings
        self._run_job = run_job
        self.queue: JobQueue | None = None
        self.worker: BackgroundWorker | None = None
        self.sweeper: asyncio.Task[None] | None = None
        self._queued: dict[int, None] = {}
        """Jobs this manager queued and has not seen settle yet (what `flush` waits for), oldest first."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, database_url: str | None, pool: SharedPool | None) -> None:
        """Open the job queue (durable in Postgres on the one pool, else on `database_url`) and, unless
        `background_worker=False`, a worker in this process: it also runs what earlier runs left queued."""
        self.queue = await open_job_queue(self.settings, database_url, pool=pool)
        if self.settings.background_worker or self.queue.name == "in-process":
            self.worker = self._new_worker(self.queue)
            self.worker.start()

    def _new_worker(self, queue: JobQueue) -> BackgroundWorker:
        s = self.settings
        return BackgroundWorker(
            queue,
            self._run_job,
            concurrency=s.background_concurrency,
            poll_seconds=s.background_poll_seconds,
            lease_seconds=s.background_lease_seconds,
            max_attempts=s.background_max_attempts,
            retry_base_seconds=s.background_retry_base_seconds,
            retry_max_seconds=s.background_retry_max_seconds,
        )

    def background(self) -> tuple[JobQueue, BackgroundWorker | None]:
        """The queue, created in-process on first use by a manager built without `create`."""
        if self.queue is None:
            self.queue = InProcessJobQueue(
                max_pending=self.settings.background_max_pending_jobs,
                max_messages=self.settings.max_messages_per_session,
                max_pending_per_user=self.settings.background_max_pending_jobs_per_user,
            )
            self.worker = self._new_worker(self.queue)
            self.worker.start()
        return self.queue, self.worker

    def queued(self, job_id: int) -> None:
        """Remember a job this manager queued (bounded: the oldest are forgotten) and wake the worker."""
        self._queued[job_id] = None
        while len(self._queued) > self.settings.background_max_pending_jobs:
            del self._queued[next(iter(self._queued))]
        if self.worker is not None:
            self.worker.notify()

    async def flush(self, timeout: float) -> bool:  # noqa: ASYNC109 - a deadline is the point of flush
        """Wait for the background tasks and the jobs queued so far, at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        tasks_done = await self.wait_tasks(timeout)
        queue, worker = self.background()
        return await self._wait_queued(queue, worker, max(0.0, deadline - time.monotonic())) and tasks_done

    async def _wait_queued(self, queue: JobQueue, worker: BackgroundWorker | None, seconds: float) -> bool:
        ids = list(self._queued)
        deadline = time.monotonic() + seconds
        done = await wait_settled(queue, ids, seconds, wake=worker.notify if worker is not None else None)
        if worker is not None:
            done = await worker.wait_running(ids, deadline - time.monotonic()) and done
        for job_id in ids:
            self._queued.pop(job_id, None)
        if not done:
            for job_id in await queue.unsettled(ids):
                self._queued[job_id] = None
        return done

    def run_in_background(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run `work` as a task of this manager (see `MemoryManager.run_in_background`)."""

        async def guarded() -> None:
            try:
                await work
            except MemoryPluginError as exc:
                logger.warning("%s background %s failed: %s", LOG_PREFIX, name, exc)

        task = asyncio.get_running_loop().create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_tasks(self, seconds: float, *, cancel: bool = False) -> bool:
        """Wait for this process's background tasks, at most `seconds`; whether they all finished."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(set(self._tasks), timeout=seconds)
        if cancel:
            for task in pending:
                task.cancel()
        return not pending

    def start_sweeper(self, sessions: SessionBackend) -> None:
        """Release expired sessions every `session_sweep_interval_seconds` (awaited on the loop's own pool for
        Postgres on the assembly's; in a worker thread for a store on the network with its own client)."""
        calls = session_calls(sessions)

        async def sweep() -> None:
            while True:
                await asyncio.sleep(self.settings.session_sweep_interval_seconds)
                expired = await calls.expire()
                if expired:
                    logger.debug("%s released %d expired sessions", LOG_PREFIX, expired)

        self.sweeper = asyncio.get_running_loop().create_task(sweep(), name="memory_plugin-session-sweeper")

    async def close(self) -> None:
        """Finish or cancel the tasks, drain the queue for at most `background_close_timeout_seconds`, stop the
        worker and the sweeper. What is left stays queued (durable in Postgres; lost in-process, logged)."""
        await self.wait_tasks(self.settings.background_close_timeout_seconds, cancel=True)
        await self._stop_background()
        if self.sweeper is not None:
            self.sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sweeper

    async def _stop_background(self) -> None:
        queue, worker = self.queue, self.worker
        self.queue = self.worker = None
        if queue is None:
            return
        timeout = self.settings.background_close_timeout_seconds
        deadline = time.monotonic() + timeout
        try:
            if worker is not None:
                await self._wait_queued(queue, worker, timeout)
                await worker.stop(max(0.0, deadline - time.monotonic()))
            left = await queue.status()
            if left.depth and queue.name == "in-process":
                logger.warning(
                    "%s closing with %d memory jobs unfinished in this process's queue: they are lost",
                    LOG_PREFIX, left.depth,
                )  # fmt: skip
            elif left.depth:
                logger.info("%s %d memory jobs stay queued for the next worker", LOG_PREFIX, left.depth)
        except MemoryPluginError as exc:
            logger.warning("%s could not drain the memory job queue at close: %s", LOG_PREFIX, exc)
        finally:
            await queue.close()
