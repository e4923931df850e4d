"""`SessionCalls`: the session operations the manager, the extraction runner and the sweeper await, and
`session_calls`, which gives them for any `SessionBackend`.

A backend on the event loop's own pool (the Postgres store on the assembly's pool) offers them as coroutines
(`on_loop`): a call is one transaction awaited on the loop, with no worker thread. Any other backend is wrapped:
the RAM store is called inline (microseconds), a network one (Redis, or Postgres on a pool of its own) in a
worker thread (`off_the_loop`), so the loop keeps serving other users meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized
from typing import Protocol
from uuid import UUID

from ..models import Message, ShortTermMemory
from .base import SessionBackend, off_the_loop

__all__ = ["SessionCalls", "ThreadedSessionCalls", "session_calls"]


class SessionCalls(Protocol):
    """`SessionBackend`'s operations that async code awaits, as coroutines (same arguments, same rules)."""

    async def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """See `SessionBackend.add_message`."""
        ...

    async def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """See `SessionBackend.update_entities`."""
        ...

    async def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """See `SessionBackend.add_intent`."""
        ...

    async def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """See `SessionBackend.snapshot`."""
        ...

    async def expire(self) -> int:
        """See `SessionBackend.expire` (the sweeper's call)."""
        ...

    async def live(self) -> int | None:
        """Live sessions of all users (`describe()`), or None when the backend does not count them."""
        ...


class ThreadedSessionCalls:
    """`SessionCalls` over a synchronous backend: inline when it does not block, else in a worker thread."""

    __slots__ = ("_backend",)

    def __init__(self, backend: SessionBackend) -> None:
        self._backend = backend

    async def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """See `SessionBackend.add_message`."""
        backend = self._backend
        if not backend.blocking:  # the RAM hot path (~2.5 µs a message): no thread, no closure
            return backend.add_message(session_id, message, user_id=user_id)
        return await off_the_loop(backend, lambda: backend.add_message(session_id, message, user_id=user_id))

    async def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """See `SessionBackend.update_entities`."""
        backend = self._backend
        await off_the_loop(backend, lambda: backend.update_entities(session_id, entities, user_id=user_id))

    async def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """See `SessionBackend.add_intent`."""
        backend = self._backend
        await off_the_loop(backend, lambda: backend.add_intent(session_id, intent, user_id=user_id))

    async def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """See `SessionBackend.snapshot`."""
        backend = self._backend
        return await off_the_loop(backend, lambda: backend.snapshot(session_id, user_id=user_id, bind=bind))

    async def expire(self) -> int:
        """See `SessionBackend.expire`."""
        return await off_the_loop(self._backend, self._backend.expire)

    async def live(self) -> int | None:
        """`len(backend)` when the backend counts its sessions, else None."""
        backend = self._backend
        if not isinstance(backend, Sized):
            return None
        return await off_the_loop(backend, backend.__len__)


def session_calls(backend: SessionBackend) -> SessionCalls:
    """The request-path operations of `backend`: its own coroutines when it offers them on this loop
    (`on_loop`), else `ThreadedSessionCalls`."""
    on_loop: SessionCalls | None = getattr(backend, "on_loop", None)
    return on_loop if on_loop is not None else ThreadedSessionCalls(backend)
