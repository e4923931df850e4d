"""How long-term facts are ranked for the context without a query.

    score = w_importance * importance/5 + w_confidence * confidence + w_recency * recency
    recency = clamp(1 - age_since_last_reinforcement / recency_window, 0, 1)

where `confidence` is the decayed confidence when a `DecayPolicy` is given (`quality/decay.py`).

The Postgres store computes the same expression in SQL (`public.memory_context` in
`supabase/migrations/`), so ranking costs one round trip; the in-memory store calls `fact_score` here.
`public.memory_rank_facts` computes the same order without scoring every fact (see its comment). With a
query, facts are ranked by `retrieval/` (the hybrid score) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .quality.decay import DecayPolicy, decayed_confidence
from .settings import MemorySettings

__all__ = ["RankingWeights", "fact_score"]


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """The weights of the fact score (see the module docstring)."""

    importance: float = 0.6
    """Weight of importance (1–5, scaled to 0–1)."""
    confidence: float = 0.3
    """Weight of confidence (0–1)."""
    recency: float = 0.1
    """Weight of recency (0–1)."""
    recency_window_days: float = 30.0
    """Age at which the recency term reaches 0."""

    @classmethod
    def from_settings(cls, settings: MemorySettings) -> RankingWeights:
        """The weights configured in `settings`."""
        return cls(
            importance=settings.weight_importance,
            confidence=settings.weight_confidence,
            recency=settings.weight_recency,
            recency_window_days=settings.recency_window_days,
        )


def fact_score(
    *,
    importance: int,
    confidence: float,
    last_reinforced_at: datetime,
    now: datetime,
    weights: RankingWeights,
    category: str | None = None,
    decay: DecayPolicy | None = None,
) -> float:
    """The ranking score of one fact at time `now`; with `decay` and `category`, on the decayed confidence."""
    if decay is not None and category is not None:
        confidence = decayed_confidence(confidence, last_reinforced_at, category, now, decay)
    age_seconds = (now - last_reinforced_at).total_seconds()
    # Clamped above too: a timestamp slightly in the future (clock skew) earns no extra weight.
    recency = min(1.0, max(0.0, 1.0 - age_seconds / (weights.recency_window_days * 86400.0)))
    return weights.importance * importance / 5.0 + weights.confidence * confidence + weights.recency * recency
