"""How long `memory-plugin maintain` keeps raw data (`settings.retention`; docs/privacy.md)."""

from __future__ import annotations

from pydantic import Field

from .flat import Flat, SettingsGroup

__all__ = ["RetentionNames", "RetentionSettings"]


class RetentionSettings(SettingsGroup):
    """How long `memory-plugin maintain` keeps raw data (`settings.retention`)."""

    raw_months: float = Field(default=12, ge=0)
    """Raw conversation data untouched this many months is deleted by `maintain`: chat histories (title, summary
    stay), conversations, Postgres sessions, checkpoints. Facts, slots, summaries stay. 0: kept forever."""

    dead_job_days: float = Field(default=30, ge=0)
    """Dead background jobs older than this are deleted by `maintain` (0: kept, up to the cap)."""

    max_dead_jobs: int = Field(default=10_000, ge=0)  # dead jobs kept, the newest (0: no cap)

    checkpoint_days: float = Field(default=30, ge=0)
    """Workflow checkpoints older than this are deleted by `maintain` (0: by `retention_raw_months` only)."""

    receipt_days: float = Field(default=90, ge=0)
    """Context receipts older than this are deleted by `maintain` (0: kept; the newest 100 per user)."""

    applied_write_days: float = Field(default=30, ge=0)
    """Applied-write records (a replayed write applies once) older than this are deleted by `maintain`; keep
    them longer than any outage the journal must survive (0: kept forever)."""


class RetentionNames:
    """The flat names (and `MEMORY_*` variables) of `RetentionSettings`' fields."""

    retention_raw_months = Flat[float]("retention.raw_months")
    retention_dead_job_days = Flat[float]("retention.dead_job_days")
    retention_max_dead_jobs = Flat[int]("retention.max_dead_jobs")
    retention_checkpoint_days = Flat[float]("retention.checkpoint_days")
    retention_receipt_days = Flat[float]("retention.receipt_days")
    retention_applied_write_days = Flat[float]("retention.applied_write_days")
