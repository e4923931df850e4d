"""Short-term memory in RAM: per-session messages, entities and intents, bound to their user, with an
inactivity TTL and bounded RAM.

Sessions live in one `OrderedDict` kept in order of last activity (every touch moves a session to the
end), and each user's sessions in a second, smaller one in the same order. That ordering gives every
policy at the cost of what it removes:

- expiry pops from the front while the front session is older than the TTL, so an access pays only for
  the sessions that actually expire (never a scan of every live session);
- a user's session cap and byte budget pop that user's least recently active sessions, so a user opening
  sessions in a loop evicts their own, never another user's;
- the store's session cap and byte budget pop the least recently active anonymous session (no user id)
  first, then the least recently active session of all; an anonymous session evicts only anonymous ones, so
  a flood of anonymous sessions never evicts a signed-in user's (when none is left to evict, the store goes
  over its caps by the one anonymous session being written rather than drop a user's).

Text is counted by the RAM CPython gives it (`text_bytes`: 1, 2 or 4 bytes a character by the widest one),
not by its length: astral-plane text (emoji) takes 4 bytes a character, and counting characters let a
64 MB budget hold 250 MB.

Expiry runs at the start of every access, so an expired session is never visible, whether or not anyone
calls `expire()`; `expire()` exists so an idle process can release the RAM (the manager's sweeper calls it).
Sessions are keyed by (owner, session id) (`session/base.py`): a second index, session id -> owners, resolves
the calls that name no user.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from ..models import Message, ShortTermMemory
from ..settings import MemorySettings
from .base import SessionLimits, new_entity_values, resolve_owner, session_limits

__all__ = ["Clock", "SessionStore", "estimated_bytes", "text_bytes"]

_Key = tuple[int, str]
"""A session's key: its owner's key (`_owner_key`) and its id."""

_ANONYMOUS = -1
"""The owner key of an anonymous session (a user's is the UUID's 128-bit int, never negative)."""


def _owner_key(user_id: UUID | None) -> int:
    """A user's key in the store's dicts: the UUID's int, hashed in C (a `UUID` hashes in Python, ~0.3 µs, and
    the hot path hashes the owner four times per message)."""
    return _ANONYMOUS if user_id is None else user_id.int


Clock = Callable[[], float]
"""Returns seconds on a monotonic scale; `time.monotonic` by default, a fake one in tests."""

# Fixed RAM per object beyond its text, fitted with tracemalloc on CPython 3.12 to two shapes: the bench's
# sessions of 2 short messages, 2 entity kinds and 1 intent (3,486 bytes traced, ~3,660 estimated) and
# sessions of 20 messages of 300 characters (20,358 traced, ~19,140 estimated): within 6 % either way.
_SESSION_BYTES = 1_500
_MESSAGE_BYTES = 550
_ENTITY_KIND_BYTES = 250
_ENTITY_BYTES = 150  # plus the value twice: its normalised key and its first spelling
_INTENT_BYTES = 100


_size = str.__sizeof__  # what sys.getsizeof returns for a str, at a quarter of its cost (~30 ns, like len)
_EMPTY_TEXT = _size("")


def text_bytes(text: str) -> int:
    """The RAM of `text`'s characters: its length for ASCII (what the fixed sizes above were fitted with), up
    to 4 bytes a character (plus a wider header) when it holds an astral-plane character."""
    return _size(text) - _EMPTY_TEXT


def estimated_bytes(message: Message) -> int:
    """The RAM a message is counted for: its text plus the objects around it."""
    return _MESSAGE_BYTES + text_bytes(message.content) + text_bytes(message.id)


@dataclass(slots=True)
class _Session:
    owner: UUID | None
    key: _Key
    """(`_owner_key(owner)`, session id)."""
    messages: deque[Message]
    last_active: float
    entities: dict[str, dict[str, str]] = field(default_factory=dict)
    """Kind -> normalised value -> value as first written (insertion-ordered, so first-seen order)."""
    entity_values: int = 0
    intents: dict[str, None] = field(default_factory=dict)
    """An insertion-ordered set."""
    messages_seen: int = 0
    """Messages ever added, including those that fell out of the window (drives the extraction cadence)."""
    size: int = _SESSION_BYTES
    """Estimated bytes (see `estimated_bytes`)."""


class SessionStore(SessionLimits):
    """In-RAM short-term memory for many concurrent sessions (a `SessionBackend`).

    Thread- and coroutine-safe: every public method takes one short lock and never awaits, so concurrent
    coroutines (or threads) see each operation as atomic. Every method takes the caller's `user_id`
    (keyword); a call without one is resolved by `resolve_owner` (`session/base.py`).
    """

    blocking: bool = False
    """Never: every call is a short in-memory operation."""

    def __init__(
        self,
        *,
        max_messages: int = 20,
        ttl_seconds: float = 3600.0,
        max_sessions: int = 100_000,
        max_bytes: int = 512 * 1024 * 1024,
        max_sessions_per_user: int = 100,
        max_bytes_per_user: int = 16 * 1024 * 1024,
        max_entity_values_per_kind: int = 50,
        max_entity_values: int = 200,
        max_intents: int = 50,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__(
            max_messages=max_messages,
            ttl_seconds=ttl_seconds,
            max_sessions_per_user=max_sessions_per_user,
            max_entity_values_per_kind=max_entity_values_per_kind,
            max_entity_values=max_entity_values,
            max_intents=max_intents,
        )
        if min(max_sessions, max_bytes, max_bytes_per_user) < 1:
            raise ValueError("max_sessions, max_bytes and max_bytes_per_user must be >= 1")
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.max_bytes_per_user = max_bytes_per_user
        self._clock = clock
        self._sessions: OrderedDict[_Key, _Session] = OrderedDict()
        self._owners: dict[str, dict[int, UUID | None]] = {}
        """Session id -> the owners with a live session of that id, by key (resolves calls without a user)."""
        self._by_owner: dict[int, OrderedDict[str, None]] = {}
        """Each owner's sessions by owner key, least recently active first (anonymous ones under `_ANONYMOUS`)."""
        self._owner_bytes: dict[int, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.expired_total = 0
        """Sessions removed for inactivity since start."""
        self.evicted_total = 0
        """Sessions removed by a session cap or a byte budget since start."""

    def close(self) -> None:
        """Nothing to release: the sessions live in this process's RAM."""

    @classmethod
    def from_settings(cls, settings: MemorySettings, *, clock: Clock = time.monotonic) -> SessionStore:
        """The store `settings` describe (window, TTL, session caps, byte budgets, entity and intent limits)."""
        return cls(
            **session_limits(settings),
            max_sessions=settings.max_sessions,
            max_bytes=settings.session_store_max_bytes,
            max_bytes_per_user=settings.session_max_bytes_per_user,
            clock=clock,
        )

    def __len__(self) -> int:
        with self._lock:
            self._expire_due(self._clock())
            return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        """Whether some owner has a live session `session_id`."""
        with self._lock:
            self._expire_due(self._clock())
            return session_id in self._owners

    @property
    def bytes_used(self) -> int:
        """Estimated bytes of all live sessions (what `max_bytes` bounds)."""
        with self._lock:
            return self._bytes

    # --- writes -----------------------------------------------------------------------------------------
    def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """Append `message` to the session (creating it, bound to `user_id`), keep the last `max_messages`.

        Returns how many messages the session has seen in total, which drives the extraction cadence.
        """
        # The hottest path of the store (~1.5 µs a message): the usual case (a live session, nothing due to
        # expire, no budget exceeded) inline, one size update per message, the budgets walked only when one is
        # exceeded.
        with self._lock:
            now = self._clock()
            sessions = self._sessions
            if sessions and next(iter(sessions.values())).last_active <= now - self.ttl_seconds:
                self._expire_due(now)
            if user_id is not None:
                session = sessions.get((user_id.int, session_id))
            else:
                owners = self._owners.get(session_id)
                session = sessions.get((next(iter(owners)), session_id)) if owners and len(owners) == 1 else None
            if session is None:
                session = self._touch(session_id, user_id)
            else:
                session.last_active = now
                sessions.move_to_end(session.key)
                self._by_owner[session.key[0]].move_to_end(session_id)
            messages = session.messages
            delta = _size(message.content) + _size(message.id)
            if len(messages) == messages.maxlen:
                oldest = messages[0]
                delta -= _size(oldest.content) + _size(oldest.id)
            else:
                delta += _MESSAGE_BYTES - 2 * _EMPTY_TEXT
            messages.append(message)
            session.messages_seen += 1
            session.size += delta
            self._bytes += delta
            if session.owner is None:  # anonymous sessions have no byte total of their own (no budget)
                if self._bytes > self.max_bytes:
                    self._enforce_budgets(session)
            else:
                owner_bytes = self._owner_bytes
                owner_bytes[session.key[0]] += delta
                if self._bytes > self.max_bytes or owner_bytes[session.key[0]] > self.max_bytes_per_user:
                    self._enforce_budgets(session)
            return session.messages_seen

    def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """Merge `entities` into the session: values are added once per kind, compared case- and accent-
        insensitively ("Aluminio 7075" = "aluminio 7075"); the first spelling seen is kept.

        All or nothing: an update that would take a kind past `max_entity_values_per_kind`, or the session
        past `max_entity_values`, raises `SessionLimitError` and keeps none of its values."""
        with self._lock:
            self._expire_due(self._clock())
            owner = self._owner(session_id, user_id, write=True)
            existing = self._sessions.get((_owner_key(owner), session_id))
            added = new_entity_values(
                session_id,
                existing.entities if existing else {},
                entities,
                known_total=existing.entity_values if existing else 0,
                max_per_kind=self.max_entity_values_per_kind,
                max_total=self.max_entity_values,
            )
            session = self._touch(session_id, owner)
            for kind_key, new in added.items():
                if new:
                    if kind_key not in session.entities:
                        session.entities[kind_key] = {}
                        self._grow(session, _ENTITY_KIND_BYTES)
                    session.entities[kind_key].update(new)
                    session.entity_values += len(new)
                    self._grow(session, sum(_ENTITY_BYTES + 2 * text_bytes(text) for text in new.values()))
            self._enforce_budgets(session)

    def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """Record an intent detected in the session (kept once, in first-seen order); a new intent past
        `max_intents` raises `SessionLimitError`."""
        text = intent.strip()
        with self._lock:
            self._expire_due(self._clock())
            owner = self._owner(session_id, user_id, write=True)
            existing = self._sessions.get((_owner_key(owner), session_id))
            if existing is not None:
                self.check_intent_room(session_id, existing.intents, text)
            session = self._touch(session_id, owner)
            if text not in session.intents:
                session.intents[text] = None
                self._grow(session, _INTENT_BYTES + text_bytes(text))
                self._enforce_budgets(session)

    def drop(self, session_id: str, *, user_id: UUID | None = None) -> bool:
        """Forget a session now. Returns whether it existed."""
        with self._lock:
            self._expire_due(self._clock())
            session = self._sessions.get((_owner_key(self._owner(session_id, user_id, write=False)), session_id))
            if session is None:
                return False
            self._remove(session)
            return True

    # --- reads --------------------------------------------------------------------------------------------
    def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """A copy of the session's state (empty if unknown or expired). Reading counts as activity; with `bind`
        and a `user_id`, an unknown session is created for that user."""
        with self._lock:
            now = self._clock()
            self._expire_due(now)
            session = self._sessions.get((_owner_key(self._owner(session_id, user_id, write=False)), session_id))
            if session is None:
                if bind and user_id is not None:
                    self._touch(session_id, user_id)
                return ShortTermMemory()
            self._mark_active(session, now)
            return ShortTermMemory(
                messages=list(session.messages),
                entities={kind: list(values.values()) for kind, values in session.entities.items()},
                intents=list(session.intents),
            )

    def messages_seen(self, session_id: str, *, user_id: UUID | None = None) -> int:
        """Messages the session has seen in total (0 if unknown or expired)."""
        with self._lock:
            self._expire_due(self._clock())
            session = self._sessions.get((_owner_key(self._owner(session_id, user_id, write=False)), session_id))
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
            self._remove(oldest)
            removed += 1
        self.expired_total += removed
        return removed

    def _owner(self, session_id: str, user_id: UUID | None, *, write: bool) -> UUID | None:
        """The owner of the session the call means (`resolve_owner`). Caller holds the lock."""
        if user_id is not None:
            return user_id
        return resolve_owner(session_id, None, self._owners.get(session_id, {}).values(), write=write)

    def _touch(self, session_id: str, user_id: UUID | None) -> _Session:
        """The session the call means (`user_id`, else resolved as a write), created if new, marked as the most
        recently active. Caller holds the lock."""
        now = self._clock()
        self._expire_due(now)
        owner = user_id if user_id is not None else self._owner(session_id, None, write=True)
        key = (_owner_key(owner), session_id)
        session = self._sessions.get(key)
        if session is not None:
            self._mark_active(session, now)
            return session
        mine = self._by_owner.get(key[0])
        if owner is not None and mine is not None and len(mine) >= self.max_sessions_per_user:
            self._evict((key[0], next(iter(mine))))
        if len(self._sessions) >= self.max_sessions:
            anonymous = self._by_owner.get(_ANONYMOUS)
            if anonymous:
                self._evict((_ANONYMOUS, next(iter(anonymous))))
            elif owner is not None:  # an anonymous session never evicts a signed-in user's
                self._evict(next(iter(self._sessions)))
        session = _Session(owner=owner, key=key, messages=deque(maxlen=self.max_messages), last_active=now)
        self._sessions[key] = session
        self._owners.setdefault(session_id, {})[key[0]] = owner
        self._bytes += session.size
        self._by_owner.setdefault(key[0], OrderedDict())[session_id] = None
        if owner is not None:
            self._owner_bytes[key[0]] = self._owner_bytes.get(key[0], 0) + session.size
        return session

    def _mark_active(self, session: _Session, now: float) -> None:
        session.last_active = now
        self._sessions.move_to_end(session.key)
        self._by_owner[session.key[0]].move_to_end(session.key[1])

    def _grow(self, session: _Session, delta: int) -> None:
        session.size += delta
        self._bytes += delta
        if session.owner is not None:
            self._owner_bytes[session.key[0]] += delta

    def _enforce_budgets(self, current: _Session) -> None:
        """Evict least recently active sessions until the budgets hold; never the session just written (it is
        the most recently active, so it goes only when it alone is over a budget, and then stays). Anonymous
        sessions go first, and an anonymous write evicts only anonymous sessions."""
        owner = current.key[0]
        mine = self._by_owner[owner]
        while current.owner is not None and self._owner_bytes[owner] > self.max_bytes_per_user and len(mine) > 1:
            self._evict((owner, next(iter(mine))))
        anonymous = self._by_owner.get(_ANONYMOUS)
        while self._bytes > self.max_bytes and anonymous and (_ANONYMOUS, next(iter(anonymous))) != current.key:
            self._evict((_ANONYMOUS, next(iter(anonymous))))
            anonymous = self._by_owner.get(_ANONYMOUS)
        if current.owner is None:
            return
        while self._bytes > self.max_bytes and len(self._sessions) > 1:
            oldest = next(iter(self._sessions))
            if oldest == current.key:  # pragma: no cover - the current session is always the last one
                break
            self._evict(oldest)

    def _evict(self, key: _Key) -> None:
        self._remove(self._sessions[key])
        self.evicted_total += 1

    def _remove(self, session: _Session) -> None:
        owner, session_id = key = session.key
        del self._sessions[key]
        owners = self._owners[session_id]
        del owners[owner]
        if not owners:
            del self._owners[session_id]
        self._bytes -= session.size
        mine = self._by_owner[owner]
        del mine[session_id]
        if session.owner is not None:
            self._owner_bytes[owner] -= session.size
        if not mine:
            del self._by_owner[owner]
            if session.owner is not None:
                del self._owner_bytes[owner]
