"""Memory work off the request path: extraction jobs queued after an answer and run by a worker.

- `jobs.py`: the job, the queue contract (`JobQueue`) and its status;
- `postgres_queue.py`: the durable queue shared by worker processes (`public.memory_jobs`);
- `memory_queue.py`: the bounded in-process queue of stores without Postgres (not durable);
- `worker.py`: `BackgroundWorker`, which drains a queue with bounded concurrency.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..errors import StoreError
from ..logs import LOG_PREFIX, logger
from ..settings import MemorySettings
from .jobs import EnqueueOutcome, ExtractionJob, JobQueue, QueueStatus
from .memory_queue import InProcessJobQueue
from .postgres_queue import PostgresJobQueue
from .worker import BackgroundWorker, JobHandler, WorkerStats

__all__ = [
    "BackgroundWorker",
    "EnqueueOutcome",
    "ExtractionJob",
    "InProcessJobQueue",
    "JobHandler",
    "JobQueue",
    "PostgresJobQueue",
    "QueueStatus",
    "WorkerStats",
    "open_job_queue",
]


async def open_job_queue(
    settings: MemorySettings,
    database_url: str | None,
    *,
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] | None = None,
) -> JobQueue:
    """The durable Postgres queue on `pool` (the manager's one pool) or else on a pool of its own on
    `database_url`; the in-process queue without either (or when the database cannot be reached now: the work
    is then not durable, and a warning says so)."""
    in_process = InProcessJobQueue(
        max_pending=settings.background_max_pending_jobs,
        max_messages=settings.max_messages_per_session,
        max_pending_per_user=settings.background_max_pending_jobs_per_user,
    )
    if pool is not None:
        return PostgresJobQueue(
            pool,
            max_pending=settings.background_max_pending_jobs,
            max_messages=settings.max_messages_per_session,
            max_pending_per_user=settings.background_max_pending_jobs_per_user,
        )
    if database_url is None:
        return in_process
    try:
        return await PostgresJobQueue.connect(
            database_url,
            max_pending=settings.background_max_pending_jobs,
            max_messages=settings.max_messages_per_session,
            max_pending_per_user=settings.background_max_pending_jobs_per_user,
            connect_timeout=settings.connect_timeout_seconds,
            pooler=settings.database_pooler,
        )
    except StoreError as exc:
        logger.warning("%s memory jobs queue in this process's RAM (not durable): %s", LOG_PREFIX, exc)
        return in_process
