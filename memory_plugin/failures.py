"""`StoreFailures`: counts long-term store failures and logs them at most once per interval."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .logs import LOG_PREFIX, logger

__all__ = ["StoreFailures"]


@dataclass(slots=True)
class StoreFailures:
    """Every failed long-term read is counted; one warning per `log_interval_seconds` at most, so a database
    outage does not flood the logs once per call."""

    log_interval_seconds: float
    """Seconds between two warnings."""
    store_failures: int = 0
    """Long-term reads that failed (answered from the outage copy or with short-term memory only)."""
    _last_warning: float | None = None

    def report(self, doing: str, exc: Exception) -> None:
        """Count a failure and log it unless one was logged less than an interval ago."""
        self.store_failures += 1
        now = time.monotonic()
        if self._last_warning is None or now - self._last_warning >= self.log_interval_seconds:
            self._last_warning = now
            logger.warning("%s long-term store failed while %s: %s", LOG_PREFIX, doing, exc)

    def count(self) -> None:
        """Count a failure someone else has logged (`ResilientStore` throttles its own)."""
        self.store_failures += 1
