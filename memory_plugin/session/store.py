"""Short-term memory: per-session messages, entities and intents, in RAM, with an inactivity TTL.

Sessions live in one `OrderedDict` kept in order of last activity (every touch moves a session to the
end). That single ordering gives both policies at the cost of what they remove:

- expiry pops from the front while the front session is older than the TTL, so an access pays only for
  the sessions that actually expire (never a scan of every live session);
- the size cap pops the front session, which is the least recently active one.

Expiry runs at the start of every access, so an expired session is never visible, whether or not anyone
calls `expire()`; `expire()` exists so an idle process can release the RAM (the manager's sweeper calls it).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..models import Message, ShortTermMemory
from ..text import normalize_key

__all__ = ["Clock", "SessionStore"]

Clock = Callable[[], float]
"""Returns seconds on a monotonic scale; `time.monotonic` by default, a fake one in tests."""


@dataclass(slots=True)
class _Session:
    messages: deque[Message]
    last_active: float
    entities: dict[str, dict[str, str]] = field(default_factory=dict)
    """Kind -> normalised value -> value as first written (insertion-ordered, so first-seen order)."""
    intents: dict[str, None] = field(default_factory=dict)
    """An insertion-ordered set."""
    messages_seen: int = 0
    """Messages ever added, including those that fell out of the window (drives the extraction cadence)."""


class SessionStore:
    """In-RAM short-term memory for many concurrent sessions.

    Thread- and coroutine-safe: every public method takes one short lock and never awaits, so concurrent
    coroutines (or threads) see each operation as atomic.
    """

    def __init__(
        self,
        *,
        max_messages: int = 20,
        ttl_seconds: float = 3600.0,
        max_sessions: int = 100_000,
        clock: Clock = time.monotonic,
    ) -> None:
        if max_messages < 1 or max_sessions < 1 or ttl_seconds <= 0:
            raise ValueError("max_messages and max_sessions must be >= 1 and ttl_seconds > 0")
        self.max_messages = max_messages
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()
        self.expired_total = 0
        """Sessions removed for inactivity since start."""
        self.evicted_total = 0
        """Sessions removed by the `max_sessions` cap since start."""

    def __len__(self) -> int:
        with self._lock:
            self._expire_due(self._clock())
            return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            self._expire_due(self._clock())
            return session_id in self._sessions

    # --- writes -----------------------------------------------------------------------------------------
    def add_message(self, session_id: str, message: Message) -> int:
        """Append `message` to the session (creating it), keep the last `max_messages`.

        Returns how many messages the session has seen in total, which drives the extraction cadence.
        """
        with self._lock:
            session = self._touch(session_id)
            session.messages.append(message)
            session.messages_seen += 1
            return session.messages_seen

    def update_entities(self, session_id: str, entities: Mapping[str, str | Iterable[str]]) -> None:
        """Merge `entities` into the session: values are added once per kind, compared case- and accent-
        insensitively ("Aluminio 7075" = "aluminio 7075"); the first spelling seen is kept."""
        with self._lock:
            session = self._touch(session_id)
            for kind, values in entities.items():
                kind_key = kind.strip().lower()
                if not kind_key:
                    continue
                bucket = session.entities.setdefault(kind_key, {})
                for value in (values,) if isinstance(values, str) else values:
                    text = str(value).strip()
                    if text:
                        bucket.setdefault(normalize_key(text), text)

    def add_intent(self, session_id: str, intent: str) -> None:
        """Record an intent detected in the session (kept once, in first-seen order)."""
        with self._lock:
            self._touch(session_id).intents.setdefault(intent.strip(), None)

    def drop(self, session_id: str) -> bool:
        """Forget a session now. Returns whether it existed."""
        with self._lock:
            return self._sessions.pop(session_id, None) is not None

    # --- reads --------------------------------------------------------------------------------------------
    def snapshot(self, session_id: str) -> ShortTermMemory:
        """A copy of the session's state (empty if unknown or expired). Reading counts as activity."""
        with self._lock:
            now = self._clock()
            self._expire_due(now)
            session = self._sessions.get(session_id)
            if session is None:
                return ShortTermMemory()
            session.last_active = now
            self._sessions.move_to_end(session_id)
            return ShortTermMemory(
                messages=list(session.messages),
                entities={kind: list(values.values()) for kind, values in session.entities.items()},
                intents=list(session.intents),
            )

    def messages_seen(self, session_id: str) -> int:
        """Messages the session has seen in total (0 if unknown or expired)."""
        with self._lock:
            self._expire_due(self._clock())
            session = self._sessions.get(session_id)
            return session.messages_seen if session else 0

    # --- housekeeping -----------------------------------------------------------------------------------------
    def expire(self) -> int:
        """Remove every session inactive for longer than the TTL. Returns how many were removed."""
        with self._lock:
            return self._expire_due(self._clock())

    def _expire_due(self, now: float) -> int:
        removed = 0
        deadline = now - self.ttl_seconds
        sessions = self._sessions
        while sessions:
            oldest = next(iter(sessions.values()))
            if oldest.last_active > deadline:
                break
            sessions.popitem(last=False)
            removed += 1
        self.expired_total += removed
        return removed

    def _touch(self, session_id: str) -> _Session:
        now = self._clock()
        self._expire_due(now)
        session = self._sessions.get(session_id)
        if session is None:
            if len(self._sessions) >= self.max_sessions:
                self._sessions.popitem(last=False)
                self.evicted_total += 1
            session = _Session(messages=deque(maxlen=self.max_messages), last_active=now)
            self._sessions[session_id] = session
        else:
            session.last_active = now
            self._sessions.move_to_end(session_id)
        return session
