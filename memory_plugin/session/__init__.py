"""Short-term memory: the `SessionBackend` protocol and its in-RAM implementation, `SessionStore`."""

from .base import SessionBackend
from .store import Clock, SessionStore

__all__ = ["Clock", "SessionBackend", "SessionStore"]
