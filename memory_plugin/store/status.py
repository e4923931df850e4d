"""`BackendStatus`: what serves long-term memory now and how the outage machinery is doing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..background.jobs import QueueStatus

__all__ = ["BackendStatus"]


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """What serves long-term memory and how the outage machinery is doing (`MemoryManager.backend_status`)."""

    backend: str
    """In use now: the primary's name ("postgres", "supabase", "memory") when it answers and nothing is
    waiting in the journal, else "fallback" (reads from the cache, writes to the journal)."""
    primary: str
    """The primary store's name."""
    postgres_reachable: bool
    """Whether the primary store answered a ping just now."""
    journal_length: int
    """Writes waiting in the journal for the database."""
    journal_path: Path | None
    """The journal file (None without one)."""
    last_error: str | None
    """The last connection error, with what was being done."""
    last_error_at: datetime | None
    """When it happened (UTC)."""
    connection_errors: int
    """Connection errors seen (each one counted, even when its log line was throttled)."""
    fallback_reads: int
    """Context reads served from the cache or answered "unavailable"."""
    journaled_writes: int
    """Writes acknowledged from the journal because the database was unreachable."""
    replayed_writes: int
    """Journal entries the database confirmed on replay."""
    replay_failures: int
    """Replay attempts that failed (the entries stay in the journal)."""
    rejected_writes: int
    """Entries the database refused repeatedly, moved to the journal's `.rejected.jsonl` file."""
    cache_entries: int
    """Users whose last context is cached."""
    require_pg_memory: bool
    """True: no fallback, unavailability raises."""
    set_aside_writes: int = 0
    """Writes in the journal's `.rejected.jsonl` file, not replayed until an operator readmits them: refused
    by the database (e.g. over its `statement_timeout`; journaled writes, or extracted facts over it even alone),
    unsigned lines, or lines that are not entries at all. `memory-plugin journal` lists them with their reasons
    (`--readmit` replays them, `--discard` deletes them)."""
    queue: QueueStatus | None = None
    """The background extraction queue (depth, oldest pending, failures, dead jobs); set by the manager."""
