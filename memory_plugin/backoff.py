"""`backoff_delay`: how long to wait before a retry, shared by the outage replay and the job worker."""

from __future__ import annotations

import random

__all__ = ["backoff_delay"]

_RNG = random.Random()


def backoff_delay(attempt: int, *, base: float, maximum: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number `attempt` (0 for the first): `base * 2**attempt` capped at `maximum`, with
    "equal jitter" (half fixed, half random), so many processes do not retry in lockstep yet never spin."""
    ceiling = min(maximum, base * 2.0 ** min(attempt, 60))
    return ceiling / 2 + (rng or _RNG).uniform(0, ceiling / 2)
