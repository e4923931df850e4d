"""`WriteRules`: the thresholds of the write rules, one value from the settings to every store and the journal."""

from __future__ import annotations

from dataclasses import dataclass

from .semantic import DEFAULT_EMBEDDING_THRESHOLD

__all__ = ["DEFAULT_NEAR_DUPLICATE_THRESHOLD", "WriteRules"]

DEFAULT_NEAR_DUPLICATE_THRESHOLD = 0.8
"""Trigram similarity at or above which a new fact reinforces a stored one (see `quality/matching.py`)."""


@dataclass(frozen=True, slots=True)
class WriteRules:
    """How a write merges into what is stored (`LongTermStore.upsert`); journaled with each outage write so a
    replay applies the rules the write was acknowledged under."""

    reinforcement_step: float = 0.1
    """Confidence added when a stored fact is stated again (bounded by 1.0)."""
    near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD
    """Trigram similarity at or above which a fact reinforces a current fact of its category (same numbers and
    negation); above 1: off."""
    embedding_threshold: float = DEFAULT_EMBEDDING_THRESHOLD
    """Cosine similarity (same embedding model) at or above which a fact reinforces a current fact of its
    category (same guard); tried before trigrams; above 1: off."""
