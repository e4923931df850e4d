"""`WriteRateLimit`: a token bucket per user over the items a write stores, so one user cannot flood the
database at the expense of everyone else's latency."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from uuid import UUID

from ..errors import MemoryLimitError

__all__ = ["WriteRateLimit"]


class WriteRateLimit:
    """Each user may write `burst` items at once and `per_second` items per second after that; a write that
    would take the user's bucket below zero is refused whole (`MemoryLimitError` with `retry_after`).

    Buckets of users not seen lately are forgotten (at most `max_users` are kept; a forgotten bucket is full).
    `per_second <= 0` turns the limit off.
    """

    def __init__(
        self,
        per_second: float,
        burst: float,
        *,
        max_users: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_second = per_second
        self.burst = burst
        self._max_users = max_users
        self._clock = clock
        self._buckets: OrderedDict[UUID, tuple[float, float]] = OrderedDict()

    def check(self, user_id: UUID, items: int) -> None:
        """Raise as `take` would, spending nothing: a cheap refusal before a write's costly work (embedding)."""
        self._refill(user_id, items)

    def take(self, user_id: UUID, items: int) -> None:
        """Spend `items` tokens of the user's bucket, or raise without spending any."""
        bucket = self._refill(user_id, items)
        if bucket is not None:
            tokens, now = bucket
            self._buckets[user_id] = (tokens - items, now)

    def _refill(self, user_id: UUID, items: int) -> tuple[float, float] | None:
        """The user's bucket (tokens, time) refilled to now and kept as the most recent; raises when `items`
        exceed its tokens. None: no limit applies."""
        if self.per_second <= 0 or items <= 0:
            return None
        now = self._clock()
        tokens, last = self._buckets.pop(user_id, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.per_second)
        self._buckets[user_id] = (tokens, now)
        while len(self._buckets) > self._max_users:
            self._buckets.popitem(last=False)
        if items > tokens:
            wait = (items - tokens) / self.per_second if items <= self.burst else None
            limit = f"{self.burst:g} at once and {self.per_second:g} per second"
            raise MemoryLimitError(
                f"user {user_id} is writing too fast ({items} items; the limit is {limit})", retry_after=wait
            )
        return tokens, now
