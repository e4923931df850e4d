"""Surviving a database outage: the write journal (`journal.py`) and `ResilientStore`, which serves reads
from a cache and journals writes while the primary store is down, and replays them when it is back."""

from .journal import WriteJournal
from .resilient import ResilientStore

__all__ = ["ResilientStore", "WriteJournal"]
