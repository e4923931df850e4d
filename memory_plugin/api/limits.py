"""`BodySizeLimit`: refuses request bodies over a size with 413, before they are read into memory.
`RateLimiter`: a per-user request rate, answered with 429 and `Retry-After` beyond it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DEFAULT_RATE_BURST", "DEFAULT_RATE_PER_SECOND", "BodySizeLimit", "RateLimiter"]


class _TooLarge(Exception):
    pass


class BodySizeLimit:
    """ASGI middleware: a declared `Content-Length` over `max_bytes`, or a streamed body growing past it, gets
    413 with the API's error body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {"error": {"code": "body_too_large", "message": f"request bodies are limited to {self.max_bytes} bytes"}}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False
        too_large = False

        async def counting_receive() -> Message:
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    too_large = True
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if too_large:
                # The app caught the refusal while reading the body (FastAPI answers a failed read with 400):
                # its answer is replaced by the 413.
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._refuse(send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(send)


DEFAULT_RATE_PER_SECOND = 10.0
"""Requests per second one user may make once their burst is spent (`MEMORY_API_RATE_PER_SECOND`)."""
DEFAULT_RATE_BURST = 100
"""Requests one user may make at once (`MEMORY_API_RATE_BURST`): a page load's dozen calls never wait."""
# Users whose buckets are kept: a full bucket is forgotten first (it allows the burst anyway), so memory stays
# bounded (~200 bytes a user) however many users call.
_MAX_TRACKED_USERS = 100_000


class RateLimiter:
    """A token bucket per user, in this process: `rate_per_second` requests a second after a burst of `burst`.

    `wait(user)` takes a token and answers 0, or answers the seconds until one is free (the request is then
    refused with 429 and `Retry-After`). Several server processes each keep their own buckets; the database's
    own bounds (write rate, counts per user) hold across them. `rate_per_second` 0 turns the limit off."""

    def __init__(self, rate_per_second: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate_per_second
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # user -> (tokens, at)

    def wait(self, user: Hashable) -> float:
        """0 after taking a token for `user`, else the seconds until one is free (nothing taken)."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        tokens, at = self._buckets.pop(user, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens < 1:
            self._buckets[user] = (tokens, now)
            return (1 - tokens) / self.rate
        if len(self._buckets) >= _MAX_TRACKED_USERS:
            self._forget_one()
        self._buckets[user] = (tokens - 1, now)  # re-inserted last: the dict's order is least recently used
        return 0.0

    def _forget_one(self) -> None:
        """Drop the least recently seen user (their bucket has refilled longest)."""
        self._buckets.pop(next(iter(self._buckets)))
