"""`PrimaryHealth`: whether `ResilientStore`'s primary answers: every call to it goes through `_call`, which
skips it while the circuit breaker is open, and records each outcome (the last error, the counts, one warning
per interval at most). A base class of `ResilientStore`, kept apart as its own concept."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar
from uuid import UUID

from ..errors import StoreUnavailableError
from ..logs import LOG_PREFIX, logger
from ..store.base import LongTermStore
from .breaker import CircuitBreaker

__all__ = ["PrimaryHealth"]

_T = TypeVar("_T")


class PrimaryHealth:
    """Outcome bookkeeping of the primary store (see the module docstring); not used on its own."""

    _primary: LongTermStore | None
    _breaker: CircuitBreaker
    _reachable: bool
    _last_error: str | None
    _last_error_at: datetime | None
    _last_warning_at: float | None
    _suppressed: int
    _log_interval: float
    _clock: Callable[[], float]
    _pending: dict[UUID, UUID]
    _work: asyncio.Event
    _recovered: asyncio.Event
    connection_errors: int

    def _unavailable(self) -> StoreUnavailableError:
        return StoreUnavailableError(self._last_error or "the long-term store is unreachable")

    async def _call(self, doing: str, operation: Callable[[LongTermStore], Awaitable[_T]]) -> _T:
        """`operation` on the primary, recording the outcome; raises `StoreUnavailableError` while there is
        no primary or it is unreachable."""
        primary = self._primary
        if primary is None or not self._breaker.allows():
            raise self._unavailable()
        started = time.monotonic()
        try:
            result = await operation(primary)
        except StoreUnavailableError as exc:
            self._breaker.failed(time.monotonic() - started)
            self._failed(doing, exc)
            raise
        self._succeeded()
        return result

    def _succeeded(self) -> None:
        self._breaker.succeeded()
        if not self._reachable:
            self._reachable = True
            logger.info("%s long-term store reachable again (%d writes to replay)", LOG_PREFIX, len(self._pending))
        self._recovered.set()
        if self._pending:
            self._work.set()

    def _failed(self, doing: str, exc: BaseException) -> None:
        """Record a connection error; log it at WARNING at most once per interval, counting the others."""
        self._reachable = False
        self.connection_errors += 1
        self._last_error = f"{doing}: {exc}"
        self._last_error_at = datetime.now(UTC)
        now = self._clock()
        if self._last_warning_at is not None and now - self._last_warning_at < self._log_interval:
            self._suppressed += 1
            logger.debug("%s long-term store unreachable while %s: %s", LOG_PREFIX, doing, exc)
            return
        suppressed, self._suppressed = self._suppressed, 0
        self._last_warning_at = now
        logger.warning(
            "%s long-term store unreachable while %s: %s%s",
            LOG_PREFIX,
            doing,
            exc,
            f" ({suppressed} more errors since the last warning)" if suppressed else "",
        )
