"""Database outages (`ResilientStore`, `settings.outage`): when Postgres is unreachable, reads fall back to the last
context read and writes go to a fsynced journal under `data_dir/journal/`, replayed in order, exactly once, when it
returns (README: "When the database is down")."""

from __future__ import annotations

from pydantic import Field

from .flat import Flat, SettingsGroup

__all__ = ["OutageNames", "OutageSettings"]


class OutageSettings(SettingsGroup):
    """What happens while the database is unreachable (`settings.outage`)."""

    resilient_store: bool = True
    """Wrap the database store the manager creates in `ResilientStore` (cache, journal, background
    reconnection). False: an unreachable database fails `MemoryManager.create` and raises on writes."""

    require_pg_memory: bool = False
    """No fallback: an unreachable database raises `StoreUnavailableError` (at startup, on reads and on
    writes) instead of using the cache and the journal. Also read from plain `REQUIRE_PG_MEMORY`."""

    fallback_cache_users: int = Field(default=1000, ge=0)
    """Users whose last long-term context is kept in RAM to answer reads during an outage (LRU)."""

    retry_base_seconds: float = Field(default=0.5, gt=0)
    """First delay before retrying to reach the database in the background; doubles per failure (jittered)."""

    retry_max_seconds: float = Field(default=60.0, gt=0)
    """Longest delay between two background attempts."""

    log_interval_seconds: float = Field(default=60.0, ge=0)
    """Connection errors are logged at WARNING at most once per interval; the others are counted (see
    `MemoryManager.backend_status`) and the next warning says how many."""


class OutageNames:
    """The flat names (and `MEMORY_*` variables) of `OutageSettings`' fields."""

    resilient_store = Flat[bool]("outage.resilient_store")
    require_pg_memory = Flat[bool]("outage.require_pg_memory", also_env=("REQUIRE_PG_MEMORY",))
    fallback_cache_users = Flat[int]("outage.fallback_cache_users")
    retry_base_seconds = Flat[float]("outage.retry_base_seconds")
    retry_max_seconds = Flat[float]("outage.retry_max_seconds")
    outage_log_interval_seconds = Flat[float]("outage.log_interval_seconds")
