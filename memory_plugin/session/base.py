"""What the manager needs from a short-term (session) store: the `SessionBackend` protocol.

Sessions are kept per owner: the key is (user, session id), and sessions started without a user are a namespace
of their own. Two users may each have a session `chat-1`; neither ever sees, extends or evicts the other's, and
no one can take an id from another (no squatting). A call that names its user acts on that user's session
(created on the first write, or by `snapshot(..., bind=True)`, which a turn's `get_memory_context(s, u)` uses).

A call without a user:

- a write (`add_message`, `update_entities`, `add_intent`: the design's session-only calls) acts on the one live
  session with that id, whoever owns it (so `get_memory_context(s, u)` then `add_message(s, m)` writes u's
  session); with no live session it starts an anonymous one; when two owners use the id it raises
  `SessionAmbiguousError` and writes nothing (pass the user);
- a read or a drop sees only the anonymous session with that id; when only users' sessions have it, it raises
  `SessionOwnershipError` (pass the user), so a session bound to a user is never read without its user.

A session lives until it expires, is evicted or dropped; afterwards its id is free again, with an empty
session. Reading an unknown session returns an empty `ShortTermMemory` and creates nothing unless `bind`.
The in-RAM `SessionStore` implements it; the networked backends (Postgres, Redis) implement the same methods
with the same rules (`resolve_owner`), keeping the owner in the session's key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeVar
from uuid import UUID

from ..errors import SessionAmbiguousError, SessionLimitError, SessionOwnershipError
from ..models import Message, ShortTermMemory
from ..text import normalize_key

if TYPE_CHECKING:
    from ..settings import MemorySettings

__all__ = [
    "SessionBackend",
    "SessionLimitSettings",
    "SessionLimits",
    "new_entity_values",
    "off_the_loop",
    "resolve_owner",
    "session_limits",
]

T = TypeVar("T")


class SessionBackend(Protocol):
    """Short-term memory of many sessions, each bound to its owner (see the module docstring)."""

    @property
    def blocking(self) -> bool:
        """Whether a call waits on the network (Postgres, Redis): async callers run it in a worker thread
        (`off_the_loop`) so that no other user's request waits for it. False for the RAM store."""
        ...

    def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """Append `message` (creating the session, bound to `user_id`); returns the messages it has seen."""
        ...

    def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """Merge entity values by kind, without duplicates; `SessionLimitError` past the session's limits."""
        ...

    def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """Record an intent (once, first-seen order); `SessionLimitError` past the session's limit."""
        ...

    def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """A copy of the session's state (empty when unknown or expired); counts as activity. With `bind` and a
        `user_id`, an unknown session is created for that user (a turn's start binds the session)."""
        ...

    def messages_seen(self, session_id: str, *, user_id: UUID | None = None) -> int:
        """Messages the session has seen in total (0 when unknown or expired)."""
        ...

    def drop(self, session_id: str, *, user_id: UUID | None = None) -> bool:
        """Forget the session now; returns whether it existed."""
        ...

    def expire(self) -> int:
        """Release every session idle for longer than the TTL; returns how many."""
        ...

    def close(self) -> None:
        """Release connections (nothing to do in RAM). The manager calls it when it closes."""
        ...


class SessionLimitSettings(TypedDict):
    """The bounds every session store takes, as keyword arguments (`session_limits`)."""

    max_messages: int
    ttl_seconds: float
    max_sessions_per_user: int
    max_entity_values_per_kind: int
    max_entity_values: int
    max_intents: int


def session_limits(settings: MemorySettings) -> SessionLimitSettings:
    """The bounds `settings` give every session store: window, TTL, per-user cap, entity and intent limits."""
    return SessionLimitSettings(
        max_messages=settings.max_messages_per_session,
        ttl_seconds=settings.session_ttl_seconds,
        max_sessions_per_user=settings.max_sessions_per_user,
        max_entity_values_per_kind=settings.max_session_entity_values_per_kind,
        max_entity_values=settings.max_session_entity_values,
        max_intents=settings.max_session_intents,
    )


class SessionLimits:
    """The bounds every session store applies, checked once here (a base class of the stores)."""

    def __init__(
        self,
        *,
        max_messages: int,
        ttl_seconds: float,
        max_sessions_per_user: int,
        max_entity_values_per_kind: int,
        max_entity_values: int,
        max_intents: int,
    ) -> None:
        if min(max_messages, max_sessions_per_user, max_entity_values_per_kind, max_entity_values, max_intents) < 1:
            raise ValueError("max_messages and the other limits must be >= 1")
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be > 0")
        self.max_messages = max_messages
        """Messages kept per session (the window)."""
        self.ttl_seconds = ttl_seconds
        """Inactivity after which a session expires."""
        self.max_sessions_per_user = max_sessions_per_user
        """Live sessions per user; a new one evicts the user's least recently active."""
        self.max_entity_values_per_kind = max_entity_values_per_kind
        self.max_entity_values = max_entity_values
        self.max_intents = max_intents

    def merged_entities(
        self, session_id: str, stored: Mapping[str, list[str]], entities: Mapping[str, str | Iterable[str]]
    ) -> dict[str, list[str]]:
        """`stored` (kind -> values in first-seen order, as the networked stores keep them) with the new values
        of `entities` appended (`new_entity_values`); `SessionLimitError` past the limits, `stored` untouched."""
        known = {kind: {normalize_key(v): v for v in values} for kind, values in stored.items()}
        added = new_entity_values(
            session_id,
            known,
            entities,
            known_total=sum(len(v) for v in known.values()),
            max_per_kind=self.max_entity_values_per_kind,
            max_total=self.max_entity_values,
        )
        merged = {kind: list(values) for kind, values in stored.items()}
        for kind_key, new in added.items():
            if new:
                merged.setdefault(kind_key, []).extend(new.values())
        return merged

    def check_intent_room(self, session_id: str, intents: Collection[str], intent: str) -> None:
        """Raise `SessionLimitError` when `intent` is new to a session already holding `max_intents` intents."""
        if intent not in intents and len(intents) >= self.max_intents:
            raise SessionLimitError(
                f"session {session_id!r} already holds {len(intents)} intents"
                f" (max_session_intents={self.max_intents}): record the intent of the current request only"
            )


def new_entity_values(
    session_id: str,
    known: Mapping[str, Mapping[str, str]],
    entities: Mapping[str, str | Iterable[str]],
    *,
    known_total: int,
    max_per_kind: int,
    max_total: int,
) -> dict[str, dict[str, str]]:
    """The entity rule every backend applies: of `entities`, the values not yet `known` (kind -> normalised
    value -> first spelling), by lower-cased kind, compared case- and accent-insensitively. Raises
    `SessionLimitError` (nothing is to be stored) when a kind would pass `max_per_kind` values or the session
    `max_total`."""
    added: dict[str, dict[str, str]] = {}
    for kind, values in entities.items():
        kind_key = kind.strip().lower()
        if not kind_key:
            continue
        bucket = known.get(kind_key, {})
        new = added.setdefault(kind_key, {})
        for value in (values,) if isinstance(values, str) else values:
            text = str(value).strip()
            key = normalize_key(text) if text else ""
            if text and key not in bucket:
                new.setdefault(key, text)
        if len(bucket) + len(new) > max_per_kind:
            raise SessionLimitError(
                f"session {session_id!r} would hold {len(bucket) + len(new)} values of entity {kind_key!r},"
                f" more than max_session_entity_values_per_kind={max_per_kind}: send only the entities of the"
                " current request, or raise the limit"
            )
    total = known_total + sum(len(new) for new in added.values())
    if total > max_total:
        raise SessionLimitError(
            f"session {session_id!r} would hold {total} entity values, more than max_session_entity_values="
            f"{max_total}: send only the entities of the current request, or raise the limit"
        )
    return added


def resolve_owner(
    session_id: str, user_id: UUID | None, live_owners: Collection[UUID | None], *, write: bool
) -> UUID | None:
    """The owner of the session a call means (see the module docstring): `user_id` when given; else, among
    the owners with a live session `session_id` (`live_owners`, None for the anonymous one), the only one for a
    `write`, the anonymous one for a read. A new session (nothing live) is anonymous. Raises
    `SessionAmbiguousError` (a write the id could route to two owners) or `SessionOwnershipError` (a read of a
    session only users have); neither says whose the sessions are."""
    if user_id is not None or not live_owners:
        return user_id
    if write:
        if len(live_owners) == 1:
            return next(iter(live_owners))
        raise SessionAmbiguousError(
            f"session id {session_id!r} is used by {len(live_owners)} owners (users, or a user and an anonymous"
            " session): pass the user_id of the session this call is for"
        )
    if None in live_owners:
        return None
    raise SessionOwnershipError(
        f"session {session_id!r} belongs to a user: pass its user_id (a call without a user reads only anonymous"
        " sessions)"
    )


async def off_the_loop(sessions: SessionBackend, call: Callable[[], T]) -> T:
    """Run one call of `sessions` from async code: inline for the RAM store (microseconds), in a worker
    thread for a store on the network (milliseconds, seconds when the server is slow), so the event loop
    keeps serving other users meanwhile."""
    if sessions.blocking:
        return await asyncio.to_thread(call)
    return call()
