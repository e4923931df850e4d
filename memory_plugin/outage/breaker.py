"""`CircuitBreaker`: while the primary store fails, calls skip it for a short, growing interval instead of each
waiting for the connection timeout.

Without it, every call during an outage waited the pool's timeout before falling back (3,000 operations
took 54 s with a 2 s timeout). With it, after a slow failure (one that waited, as for a timeout) the breaker
is open: calls fail over at once; when
the interval is over, one call (the probe) goes to the primary; if it fails, the interval doubles (up to
`maximum`), if it succeeds (or anything else reaches the primary, e.g. the journal's replay) the breaker
closes. So an outage costs one timeout per interval, and calls return to the primary at most `maximum`
seconds after it answers again. A failure that came back at once (e.g. "connection refused") costs no
more than skipping would: it leaves the breaker closed, so the next call tries the primary again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Whether to try the primary now.

    Args:
        base_seconds: The first interval skipped after a failure.
        maximum_seconds: The longest interval: bounds how long calls keep failing over after recovery
            when nothing else (a replay, a ping) notices it first.
        slow_seconds: A failure that took at least this long opens the breaker; a quicker one does not
            (retrying costs no more than failing over).
        clock: Monotonic clock (tests inject one).
    """

    def __init__(
        self,
        *,
        base_seconds: float = 0.2,
        maximum_seconds: float = 2.0,
        slow_seconds: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if base_seconds <= 0 or maximum_seconds < base_seconds:
            raise ValueError(f"need 0 < base_seconds <= maximum_seconds, got {base_seconds}, {maximum_seconds}")
        self._base = base_seconds
        self._maximum = maximum_seconds
        self._slow = slow_seconds
        self._clock = clock
        self._interval = 0.0  # 0: closed
        self._retry_at = 0.0
        self.skipped = 0
        """Calls that failed over without trying the primary."""

    def allows(self) -> bool:
        """Whether this call may go to the primary. While open, one call per interval does (the probe)."""
        if self._interval == 0:
            return True
        now = self._clock()
        if now < self._retry_at:
            self.skipped += 1
            return False
        # This call probes; the others keep failing over until it has answered (or for one more interval).
        self._retry_at = now + self._interval
        return True

    def failed(self, elapsed: float) -> None:
        """A call to the primary failed after `elapsed` seconds: open if it was slow, or double the interval
        if already open (the probe failed)."""
        if self._interval == 0 and elapsed < self._slow:
            return
        self._interval = self._base if self._interval == 0 else min(self._interval * 2, self._maximum)
        self._retry_at = self._clock() + self._interval

    def succeeded(self) -> None:
        """The primary answered: close."""
        self._interval = 0.0
