"""Confidence decay: how sure we still are of a fact that has not been stated again for a while.

    decayed = confidence × 0.5 ^ (days since last_reinforced_at / half_life_days[category])

computed at read time, in SQL (`public.memory_rank_facts`) and here (in-memory store, the confidence shown to
agents), so no job has to rewrite rows for it to hold. Restating a fact reinforces it and resets the clock.
A category without a half-life (or with 0) does not decay: rejections never do.

`MemorizedFact.confidence` in a `MemoryContext` is the decayed value (what the memory believes now);
`list_memory`, `fact_history` and `update_memory` return the stored value (the confidence when the fact was
last stated). Facts whose decayed confidence fell below `floor` never reach the prompt; the maintenance job
(`MemoryAdmin.archive_decayed`, `memory-plugin maintain`) archives them so they also leave the ranking
index, but correctness does not depend on it running.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["DEFAULT_DECAY_FLOOR", "DEFAULT_HALF_LIFE_DAYS", "DecayPolicy", "decayed_confidence"]

DEFAULT_HALF_LIFE_DAYS: Mapping[str, float] = {
    "preference": 180.0,  # tastes drift, slowly: half as sure after six months without hearing it again
    "requirement": 365.0,  # certifications and tolerances are set by the user's own customers; they last
    "constraint": 120.0,  # budgets and deadlines are renegotiated: half as sure after four months
    "feedback": 90.0,  # a complaint about last quarter's delivery matters less each month
    "rejection": 0.0,  # "never suggest X" holds until the user says otherwise: no decay
    "goal": 90.0,  # goals are met or dropped
    "routine": 120.0,
    "contact": 365.0,
    "health_note": 180.0,
    "fact": 365.0,
}
"""Half-life in days per fact category (0: no decay). Override some with `MEMORY_HALF_LIFE_DAYS`."""

DEFAULT_DECAY_FLOOR = 0.2
"""Decayed confidence below which a fact is no longer shown (and maintenance archives it)."""


@dataclass(frozen=True, slots=True)
class DecayPolicy:
    """Half-lives per category and the floor below which a decayed fact is not shown."""

    half_life_days: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_HALF_LIFE_DAYS))
    """Days for confidence to halve without reinforcement, per category; 0 or missing: no decay."""
    floor: float = DEFAULT_DECAY_FLOOR
    """Facts whose decayed confidence is below this never reach the prompt (0: show all)."""

    def half_life(self, category: str) -> float | None:
        """The category's half-life in days, None when it does not decay."""
        days = self.half_life_days.get(category)
        return days if days is not None and days > 0 else None

    def as_json(self) -> dict[str, Any]:
        """Half-lives as the `p_half_life_days` JSON object the SQL functions take (only decaying ones)."""
        return {category: days for category, days in self.half_life_days.items() if days and days > 0}


def decayed_confidence(
    confidence: float, last_reinforced_at: datetime, category: str, now: datetime, policy: DecayPolicy
) -> float:
    """`confidence` decayed for the time since `last_reinforced_at` (never raised: a future time counts as 0)."""
    half_life = policy.half_life(category)
    if half_life is None:
        return confidence
    age_days = max(0.0, (now - last_reinforced_at).total_seconds()) / 86400.0
    return confidence * math.exp2(-age_days / half_life)
