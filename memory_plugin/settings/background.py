"""Background extraction: the job queue and its worker (`settings.background`; docs/background.md)."""

from __future__ import annotations

from pydantic import Field

from .flat import Flat, SettingsGroup

__all__ = ["BackgroundNames", "BackgroundSettings"]


class BackgroundSettings(SettingsGroup):
    """The extraction job queue and its worker (`settings.background`)."""

    extraction: bool = True
    """The capability and the budget workflow queue extraction and return at once (a background worker runs
    it). False: they extract before the run returns, as `extract_if_due` does (the answer waits for the
    extraction model)."""

    worker: bool = True
    """Run a worker in this process. False: only queue; a separate `memory-plugin worker` drains the queue
    (Postgres only: without Postgres the queue is in this process's RAM and nothing else can drain it)."""

    concurrency: int = Field(default=4, ge=1)
    """Jobs a worker runs at once (different sessions; a session's jobs always run one at a time)."""

    max_pending_jobs: int = Field(default=10_000, ge=1)
    """Waiting jobs beyond which a trigger that would add a job for a user already holding one is deferred: its
    messages wait in the user's backlog until there is room (a session's waiting job always absorbs new
    messages; docs/background.md)."""

    max_pending_jobs_per_user: int = Field(default=100, ge=1)
    """Waiting jobs of one user beyond which that user's trigger is deferred as above (at most 10 × this many
    deferred sessions per user, then refused: the messages stay pending in the session). A user at this limit, or
    one filling the whole queue, never refuses another user's extraction: the queue's limit refuses only users
    already holding a waiting job. 100: a user's sessions each hold one waiting job at most."""

    lease_seconds: float = Field(default=120.0, gt=0)
    """How long a claimed job is reserved for its worker (renewed while it runs); a crashed worker's jobs are
    claimed again after this."""

    max_attempts: int = Field(default=5, ge=1)
    """Failed attempts after which a job is dead (kept and shown; `memory-plugin worker --retry-dead`)."""

    retry_base_seconds: float = Field(default=2.0, gt=0)
    """First retry delay of a failed job, doubled at each attempt (with jitter)."""

    retry_max_seconds: float = Field(default=600.0, gt=0)
    """Longest retry delay of a failed job."""

    poll_seconds: float = Field(default=1.0, gt=0)
    """How often an idle worker looks for jobs queued by other processes and retries coming due (a job queued
    in the worker's own process wakes it at once)."""

    close_timeout_seconds: float = Field(default=10.0, ge=0)
    """How long `close()` lets queued and running jobs finish; what is left stays queued (in Postgres) or is
    lost (in-process queue), with a warning."""


class BackgroundNames:
    """The flat names (and `MEMORY_*` variables) of `BackgroundSettings`' fields."""

    background_extraction = Flat[bool]("background.extraction")
    background_worker = Flat[bool]("background.worker")
    background_concurrency = Flat[int]("background.concurrency")
    background_max_pending_jobs = Flat[int]("background.max_pending_jobs")
    background_max_pending_jobs_per_user = Flat[int]("background.max_pending_jobs_per_user")
    background_lease_seconds = Flat[float]("background.lease_seconds")
    background_max_attempts = Flat[int]("background.max_attempts")
    background_retry_base_seconds = Flat[float]("background.retry_base_seconds")
    background_retry_max_seconds = Flat[float]("background.retry_max_seconds")
    background_poll_seconds = Flat[float]("background.poll_seconds")
    background_close_timeout_seconds = Flat[float]("background.close_timeout_seconds")
