"""Short-term memory: the `SessionBackend` protocol (`base.py`) and its stores: in RAM (`store.py`, the default),
Postgres (`postgres_store.py`) and Redis (`redis_store.py`), shared by every worker process; `calls.py`: the
operations the manager awaits (`session_calls`)."""

from .base import SessionBackend, off_the_loop
from .calls import SessionCalls, session_calls
from .store import Clock, SessionStore

__all__ = ["Clock", "SessionBackend", "SessionCalls", "SessionStore", "off_the_loop", "session_calls"]
