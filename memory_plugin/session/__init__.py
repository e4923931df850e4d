"""Short-term memory: the `SessionBackend` protocol and its in-RAM implementation, `SessionStore`."""

from .base import SessionBackend, off_the_loop
from .store import Clock, SessionStore

__all__ = ["Clock", "SessionBackend", "SessionStore", "off_the_loop"]
