"""Short-term memory: the in-RAM session store."""

from .store import Clock, SessionStore

__all__ = ["Clock", "SessionStore"]
