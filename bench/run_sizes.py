"""The sizes and targets of `bench.run` (`--quick` or full), and the helpers its tables share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ADD_MESSAGE_TARGET",
    "CONTEXT_P95_TARGET_MS",
    "FULL",
    "QUICK",
    "RLS_PRELUDE_TARGET_MS",
    "RLS_PRELUDE_TARGET_PCT",
    "Sizes",
    "percentile",
    "verdict",
]

ADD_MESSAGE_TARGET = 100_000.0
"""add_message calls per second through MemoryManager."""
CONTEXT_P95_TARGET_MS = 5.0
"""get_memory_context p95 at the largest fact count."""
RLS_PRELUDE_TARGET_PCT = 10.0
RLS_PRELUDE_TARGET_MS = 0.2
"""The RLS prelude may cost at most this much at p50 (either bound)."""


@dataclass(frozen=True, slots=True)
class Sizes:
    """How big each benchmark is."""

    messages: int
    """Messages written in the add_message benchmark."""
    sessions: int
    """Sessions those messages are spread across."""
    repeats: int
    """add_message runs per path (the median is reported)."""
    fact_counts: tuple[int, ...]
    """Facts of the measured user, one latency row each."""
    other_rows: int
    """Rows of other users in the same table."""
    warmup_calls: int
    """Untimed get_memory_context calls before timing."""
    timed_calls: int
    """Timed get_memory_context calls per row."""
    live_sessions: int
    """Live sessions in the RAM benchmark."""


FULL = Sizes(
    messages=200_000,
    sessions=1_000,
    repeats=3,
    fact_counts=(1_000, 10_000),
    other_rows=100_000,
    warmup_calls=50,
    timed_calls=600,
    live_sessions=100_000,
)
QUICK = Sizes(
    messages=20_000,
    sessions=200,
    repeats=1,
    fact_counts=(100, 1_000),
    other_rows=5_000,
    warmup_calls=5,
    timed_calls=50,
    live_sessions=5_000,
)


def verdict(ok: bool) -> str:
    """A table's verdict cell for a target."""
    return "✅ met" if ok else "❌ missed"


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, math.ceil(pct / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]
