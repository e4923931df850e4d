"""Short-term memory: the `SessionBackend` protocol (`base.py`) and its stores: in RAM (`store.py`, the default),
Postgres (`postgres_store.py`) and Redis (`redis_store.py`), shared by every worker process."""

from .base import SessionBackend, off_the_loop
from .store import Clock, SessionStore

__all__ = ["Clock", "SessionBackend", "SessionStore", "off_the_loop"]
