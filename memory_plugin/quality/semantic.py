"""Near-duplicates by meaning: a fact worded otherwise ("Le gusta el aluminio 7075" / "Prefiere el aluminio
7075") reinforces the stored one when their embeddings are close.

A new fact with an embedding is a near-duplicate of a current fact of the same user and category when

1. the stored fact has a vector of the **same model** (two models' vectors are never compared),
2. their **cosine similarity** is at least `MemorySettings.dedup_embedding_threshold` (default 0.85), and
3. their **guards** are equal (`matching.match_guard`: numbers and codes, negation, and the configured
   vocabulary's named values — weekdays, months, colours, a shop's materials), and the stored fact is not
   the one the new fact `replaces`.

The trigram rule's word-swap check does not apply: a paraphrase swaps words ("gusta" for "prefiere"), which
is what embeddings are for. What a swap would have caught is a different value in otherwise equal sentences,
which embeddings rate as near-identical ("…los lunes…" / "…los viernes…": 0.95 with MiniLM; "Prefiere el
aluminio" / "Prefiere el acero": 0.88): the guard's named values keep those apart, and numbers keep
"aluminio 7075" from "aluminio 6061". A substitution outside those closed sets (two company names, two
people) is only kept apart by the threshold.

Order of the rules for one item: a stored row with the same hash, else the most similar fact by embedding
(this module), else the trigram rule (`matching.py`). Within one write, items are folded by trigrams
(`fold_near_duplicates`) and then by embeddings (`fold_semantic_duplicates`), the earlier wording staying.

The threshold was chosen on Spanish and English paraphrase pairs measured with the offline
all-MiniLM-L6-v2 (tests/test_semantic_dedup.py and the README list them); MiniLM is trained on English, so
Spanish paraphrases score lower and an English fact and its Spanish translation rarely reach it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..rows import MemoryItem
from .matching import fold_similar

__all__ = ["DEFAULT_EMBEDDING_THRESHOLD", "cosine_similarity", "fold_semantic_duplicates"]

DEFAULT_EMBEDDING_THRESHOLD = 0.85
"""Default `MemorySettings.dedup_embedding_threshold` (see the module docstring)."""


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 when either is zero), as pgvector's `1 - (a <=> b)`."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm > 0 else 0.0


def fold_semantic_duplicates(items: Sequence[MemoryItem], threshold: float) -> tuple[list[MemoryItem], int]:
    """Within one write, fold each fact into the earlier fact of the same category and guard whose embedding
    (same model) is the most similar, at least `threshold`; as `matching.fold_near_duplicates` (the earlier
    wording stays). Returns the items left and how many were folded. Threshold above 1 turns folding off."""

    def group_of(item: MemoryItem) -> tuple[str, ...] | None:
        if item.kind != "fact" or item.embedding is None or item.embedding_model is None or item.match_guard is None:
            return None
        return (item.category, item.match_guard, item.embedding_model)

    def similarity(earlier: MemoryItem, item: MemoryItem) -> float:
        assert earlier.embedding is not None
        assert item.embedding is not None
        return cosine_similarity(earlier.embedding, item.embedding)

    return fold_similar(items, group_of, similarity, threshold)
