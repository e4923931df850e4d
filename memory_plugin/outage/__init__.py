"""Surviving a database outage: `ResilientStore` (`resilient.py`), which serves reads from a cache
(`cache.py`) and journals writes while the primary store is unreachable, and replays them when it is back
(`replay.py`); whether the primary answers (`health.py`, `breaker.py`); the write journal (`journal.py`, its
entries in `entry.py`, its crash-safe files in `durable.py`)."""

from .journal import WriteJournal
from .resilient import ResilientStore

__all__ = ["ResilientStore", "WriteJournal"]
