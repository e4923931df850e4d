"""`BackgroundWorker`: drains a `JobQueue` with bounded concurrency — claims due jobs, runs them, keeps their
leases while they run, completes them or records the failure (exponential backoff, then dead)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..backoff import backoff_delay
from ..errors import StatementLimitError
from ..logs import LOG_PREFIX, logger
from .jobs import ExtractionJob, JobQueue

__all__ = ["BackgroundWorker", "JobHandler", "WorkerStats", "wait_settled"]

JobHandler = Callable[[ExtractionJob, JobQueue, str], Awaitable[None]]
"""Runs one job: `handler(job, queue, worker_id)`; writes under `queue.hold(job, worker_id)`; raises to fail it."""


@dataclass(slots=True)
class WorkerStats:
    """What this worker did since it started."""

    jobs_done: int = 0
    jobs_failed: int = 0
    """Failed attempts (retried later, or dead)."""
    jobs_dead: int = 0
    jobs_released: int = 0
    """Claimed jobs given back untried at close."""


def worker_id() -> str:
    """A name unique to this worker: host, process and a random suffix (leases are per worker)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class BackgroundWorker:
    """Claims up to `concurrency` jobs at a time from `queue` and runs them with `handler`.

    `notify()` wakes it at once (a job was queued in this process); otherwise it polls every `poll_seconds`
    (jobs queued by other processes, retries coming due, leases expiring).
    """

    def __init__(
        self,
        queue: JobQueue,
        handler: JobHandler,
        *,
        concurrency: int,
        poll_seconds: float,
        lease_seconds: float,
        max_attempts: int,
        retry_base_seconds: float,
        retry_max_seconds: float,
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.retry_base_seconds = retry_base_seconds
        self.retry_max_seconds = retry_max_seconds
        self.id = worker_id()
        self.stats = WorkerStats()
        self._wake = asyncio.Event()
        self._running: dict[int, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Start claiming in the background of the running event loop."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._loop(), name="memory_plugin-worker")

    def notify(self) -> None:
        """A job was queued: claim now instead of at the next poll."""
        self._wake.set()

    @property
    def busy(self) -> int:
        """Jobs running now in this worker."""
        return len(self._running)

    async def run_until_stopped(self) -> None:
        """Run in the foreground (the `memory-plugin worker` command) until cancelled."""
        self.start()
        assert self._loop_task is not None
        await self._loop_task

    async def _loop(self) -> None:
        while not self._stopping:
            free = self.concurrency - len(self._running)
            claimed: list[ExtractionJob] = []
            if free > 0:
                try:
                    claimed = await self.queue.claim(self.id, free, self.lease_seconds)
                except Exception as exc:  # the database is away: keep polling, never die
                    logger.warning("%s background worker could not claim jobs: %s", LOG_PREFIX, exc)
            for job in claimed:
                task = asyncio.get_running_loop().create_task(self._execute(job), name=f"memory_plugin-job-{job.id}")
                self._running[job.id] = task
                task.add_done_callback(functools.partial(self._finished, job.id))
            # Woken at once by a finished job (a slot is free) or a job queued in this process.
            await self._wait(self.poll_seconds)

    def _finished(self, job_id: int, _task: asyncio.Task[None]) -> None:
        self._running.pop(job_id, None)
        self._wake.set()

    async def _wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _execute(self, job: ExtractionJob) -> None:
        keeper = asyncio.get_running_loop().create_task(self._keep_lease(job))
        try:
            await self.handler(job, self.queue, self.id)
            self.stats.jobs_done += 1
        except asyncio.CancelledError:
            # Closing before the job finished: back to the queue, due now, this attempt not counted.
            with contextlib.suppress(Exception):
                await self.queue.release(job, self.id)
            raise
        except Exception as exc:
            await self._failed(job, exc)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _failed(self, job: ExtractionJob, exc: Exception) -> None:
        self.stats.jobs_failed += 1
        # A statement over a database limit fails the same way on every attempt (`database/classify.py`):
        # retrying it would only hold the session's later jobs back for the backoff; it is kept dead at once.
        # A lock timeout is the exception: the lock is held for a moment, and the job's next attempt passes.
        over_limit = isinstance(exc, StatementLimitError) and exc.limit != "lock_timeout"
        dead = job.attempts >= self.max_attempts or over_limit
        delay = backoff_delay(job.attempts, base=self.retry_base_seconds, maximum=self.retry_max_seconds)
        if dead:
            self.stats.jobs_dead += 1
            logger.error(
                "%s memory job %d (session %s) failed %d times, now dead (memory-plugin worker --retry-dead): %s",
                LOG_PREFIX, job.id, job.session_id, job.attempts, exc,
            )  # fmt: skip
        else:
            logger.warning(
                "%s memory job %d (session %s) failed (attempt %d), retrying in %.1fs: %s",
                LOG_PREFIX, job.id, job.session_id, job.attempts, delay, exc,
            )  # fmt: skip
        try:
            await self.queue.fail(job, self.id, f"{type(exc).__name__}: {exc}", delay_seconds=delay, dead=dead)
        except Exception as fail_exc:  # the lease expires and the job runs again: nothing is lost
            logger.warning("%s could not record the failure of job %d: %s", LOG_PREFIX, job.id, fail_exc)

    async def _keep_lease(self, job: ExtractionJob) -> None:
        # Renewed at a third of the lease: two renewals can fail before another worker may claim the job.
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            with contextlib.suppress(Exception):
                await self.queue.extend(job, self.id, self.lease_seconds)

    async def wait_running(self, job_ids: Sequence[int], seconds: float) -> bool:
        """Wait (at most `seconds`) until this worker is no longer running any of these jobs: a job erased from
        the queue while running here is settled for the queue, but its task still decides what to write."""
        wanted = set(job_ids)
        tasks = [task for job_id, task in self._running.items() if job_id in wanted]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=max(seconds, 0.0))
        return not pending

    async def stop(self, grace_seconds: float) -> int:
        """Stop claiming, let running jobs finish for at most `grace_seconds`, then give the rest back to the
        queue; returns how many were given back."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        tasks = dict(self._running)
        if tasks:
            await asyncio.wait(tasks.values(), timeout=grace_seconds)
        released = 0
        for task in tasks.values():
            if task.done():
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            released += 1
        self.stats.jobs_released += released
        return released


async def wait_settled(
    queue: JobQueue, job_ids: Sequence[int], seconds: float, *, wake: Callable[[], None] | None = None
) -> bool:
    """Wait until these jobs are settled (done, dead, or failed and waiting for their retry), at most
    `seconds`; returns whether they all are. `wake`: called on each check (a local worker claims at once)."""
    deadline = time.monotonic() + seconds
    todo = list(job_ids)
    while todo:
        if wake is not None:
            wake()
        todo = sorted(await queue.unsettled(todo))
        remaining = deadline - time.monotonic()
        if not todo or remaining <= 0:
            break
        # 20 ms: short against an extraction (~1 s), and one cheap indexed query per check.
        await asyncio.sleep(min(0.02, remaining))
    return not todo
