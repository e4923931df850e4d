"""Idempotent turn finishes: a `POST /api/memory/turns` retried with its `Idempotency-Key` records the exchange
once.

A client that retries a finish (after a timeout, a 503, a dropped connection) cannot know whether the first
attempt recorded the exchange, and a second recording would put the exchange in the session twice (and count it
twice towards the extraction cadence). The key names one logical finish per user (`chats.idempotency.AppendKey`:
the same key and request hash rules as a chat's append): a retry with the same body gets the first attempt's
answer and records nothing; the same key with another body is refused (`IdempotencyKeyReusedError`, 422).

The keys live in this process (the session they guard is this process's manager's): the newest
`MAX_TURN_KEYS` finishes of all users are remembered, about 2 MB; a retry comes within seconds. A retry sent
while the first attempt still runs waits for it. An attempt that recorded nothing (`recorded: false`) or
failed forgets its key, so its retry records the exchange.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast
from uuid import UUID

from ..chats.idempotency import AppendKey
from ..errors import IdempotencyKeyReusedError

__all__ = ["MAX_TURN_KEYS", "REUSED_TURN_MESSAGE", "TurnKeys"]

MAX_TURN_KEYS = 10_000
"""Finishes remembered (all users, newest first): ~200 bytes each with the answer's outcome."""

REUSED_TURN_MESSAGE = (
    "this idempotency key was already used with a different turn; nothing was recorded (a retry sends the same"
    " request with its key; a new turn needs a new key)"
)

T = TypeVar("T")


class TurnKeys:
    """The idempotency keys of recent turn finishes (module docstring)."""

    def __init__(self, max_keys: int = MAX_TURN_KEYS) -> None:
        self._max = max_keys
        self._done: OrderedDict[tuple[UUID, str], tuple[str, asyncio.Future[object]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._done)

    async def once(self, user: UUID, key: AppendKey, work: Callable[[], Awaitable[T]], keep: Callable[[T], bool]) -> T:
        """`work()`'s result, run once per (`user`, `key.key`): a retry with the same request hash gets the first
        result (waiting for it if it still runs); another hash raises `IdempotencyKeyReusedError`. A result
        `keep` refuses, or an exception, forgets the key (the retry runs `work` again)."""
        slot = (user, key.key)
        known = self._done.get(slot)
        if known is not None:
            if known[0] != key.request_hash:
                raise IdempotencyKeyReusedError(REUSED_TURN_MESSAGE)
            self._done.move_to_end(slot)
            return cast("T", await asyncio.shield(known[1]))  # set by this method from `work()`: a T
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._done[slot] = (key.request_hash, future)
        while len(self._done) > self._max:
            self._done.popitem(last=False)
        try:
            value = await work()
        except BaseException as exc:
            self._forget(slot, future)
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # a retry waiting on it re-raises; nobody waiting: not "never retrieved"
            else:
                future.cancel()
            raise
        if not keep(value):
            self._forget(slot, future)
        future.set_result(value)
        return value

    def _forget(self, slot: tuple[UUID, str], future: asyncio.Future[object]) -> None:
        known = self._done.get(slot)
        if known is not None and known[1] is future:
            del self._done[slot]
