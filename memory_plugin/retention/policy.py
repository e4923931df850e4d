"""`RetentionPolicy`: the ages past which rows are deleted; `RetentionReport`: what one run deleted. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..settings import MemorySettings

__all__ = ["RetentionPolicy", "RetentionReport"]

DAYS_PER_MONTH = 30.4375
"""A month of the policy: a Gregorian year's 365.25 days over 12."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long each kind of row is kept. 0 keeps that kind forever.

    Facts, preferences, projects, slots and summaries are what memory is for: kept until the user deletes them
    (`forget`, `erase`). Raw conversation data ages out: a chat's histories (its title, summary and turn count
    stay), stored conversations not updated since, Postgres short-term sessions and workflow checkpoints."""

    raw_months: float = 12
    """Raw conversation data not touched for this long is deleted (chats: the histories are emptied)."""
    dead_job_days: float = 30
    """Dead background jobs (failed every attempt) are deleted after this long."""
    max_dead_jobs: int = 10_000
    """At most this many dead jobs are kept (the newest), whatever their age (0: no cap)."""
    checkpoint_days: float = 30
    """Workflow checkpoints older than this are deleted, whatever `raw_months` says: a checkpoint resumes a
    workflow interrupted mid-way, which nobody resumes after a month (the newest per user are also capped by
    count, `checkpoints_per_user`)."""
    receipt_days: float = 90
    """Context receipts (what the agent was given on a turn) older than this are deleted (the newest 100 per
    user are also capped by count)."""
    applied_write_days: float = 30
    """Records of applied writes (which make a replayed write apply once) are kept this long: longer than any
    outage the outage journal must survive."""

    @classmethod
    def from_settings(cls, settings: MemorySettings) -> RetentionPolicy:
        """The policy of the `MEMORY_RETENTION_*` settings."""
        group = settings.retention
        return cls(
            raw_months=group.raw_months,
            dead_job_days=group.dead_job_days,
            max_dead_jobs=group.max_dead_jobs,
            applied_write_days=group.applied_write_days,
            checkpoint_days=group.checkpoint_days,
            receipt_days=group.receipt_days,
        )

    def checkpoint_cutoff(self, now: datetime) -> datetime | None:
        """Checkpoints go at the sooner of `checkpoint_days` and `raw_months` (None: kept forever)."""
        cutoffs = [
            c for c in (self.cutoff(now, days=self.checkpoint_days), self.cutoff(now, months=self.raw_months)) if c
        ]
        return max(cutoffs) if cutoffs else None

    def cutoff(self, now: datetime, *, months: float = 0, days: float = 0) -> datetime | None:
        """The instant before which rows are past `months` or `days` (None: kept forever)."""
        span = months * DAYS_PER_MONTH + days
        return now - timedelta(days=span) if span > 0 else None


@dataclass(slots=True)
class RetentionReport:
    """Rows deleted (chats: histories emptied) by one run, per table."""

    removed: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.removed.values())

    def describe(self) -> str:
        """One line: `12 public.chats, 3 public.memory_jobs` (or `nothing`)."""
        parts = [f"{n} {table}" for table, n in self.removed.items() if n]
        return ", ".join(parts) if parts else "nothing"
