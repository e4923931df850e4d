"""`ScoredMemory`: one search hit, with the parts of its score so that a ranking can be explained."""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import itemgetter
from typing import Any
from uuid import UUID

from ..rows import MemoryRecord

__all__ = ["ScoreComponents", "ScoredMemory"]


@dataclass(frozen=True, slots=True)
class ScoreComponents:
    """Each signal of the score, before weighting (see `SearchWeights` for the formula)."""

    text: float = 0.0
    """Full-text relevance (BM25), 0–1 (1: the best text match among the candidates)."""
    vector: float = 0.0
    """Cosine similarity of the embeddings (0 without a usable embedding)."""
    neighbour: float = 0.0
    """Best cosine similarity of the previous or next fact of the same session."""
    trigram: float = 0.0
    """Trigram word similarity (0 when its weight is 0)."""
    speaker: float = 0.0
    """1 when the fact's speaker is the one person the question names."""
    date: float = 0.0
    """1 inside a date the question names, less nearby, 0 otherwise."""
    time: float = 0.0
    """1 for a "when" question and a text holding a time expression."""
    importance: float = 0.0
    """importance / 5."""
    confidence: float = 0.0
    """The fact's confidence."""
    recency: float = 0.0
    """1 just reinforced, falling to 0 over the recency window."""
    session: float = 0.0
    """Reranker: the relative hybrid score of the best other candidate of the same session."""
    adjacent: float = 0.0
    """Reranker: the relative hybrid score of the candidate just before or after it in its session."""
    entity: float = 0.0
    """Reranker: the share of the question's names and numbers found in the text."""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ScoreComponents:
        """From `memory_search`'s `<name>_score` columns."""
        # The column names once, not `fields()` per row: it was a third of a 100-row search's conversion. One
        # itemgetter over `memory_search`'s columns rather than a `get` each: 2.6 against 3.9 µs a row.
        try:
            values = _ROW_SCORES(row)
        except KeyError:  # a row without some of them: those are 0
            return cls(*[float(row.get(column) or 0.0) for column in _SCORE_COLUMNS])
        return cls(*[float(v or 0.0) for v in values])

    def as_dict(self) -> dict[str, float]:
        """The components by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_SCORE_COLUMNS = tuple(f"{f.name}_score" for f in fields(ScoreComponents))
_ROW_SCORES = itemgetter(*_SCORE_COLUMNS)


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A memory found by `MemoryManager.search`, best first."""

    memory: MemoryRecord
    """The stored row (content, category, metadata, occurred_at…)."""
    score: float
    """The final score (higher is better): the reranker's (`retrieval/rerank.py`), or without it the hybrid
    score, the weighted sum of `components` (`SearchWeights`)."""
    components: ScoreComponents
    """What the score is made of."""
    previous_id: UUID | None = None
    """The fact just before it in its session (the neighbour the ranking looks at), if any."""
    hybrid: float | None = None
    """The hybrid score, when `score` is the reranker's."""

    @classmethod
    def from_search_row(cls, row: dict[str, Any], memory: MemoryRecord) -> ScoredMemory:
        """From a `memory_search` row (its `memory` column parsed as `memory`)."""
        previous = row.get("prev_memory_id")
        hybrid = row.get("hybrid_score")
        return cls(
            memory,
            float(row["score"]),
            ScoreComponents.from_row(row),
            previous if isinstance(previous, UUID) or previous is None else UUID(str(previous)),
            float(hybrid) if hybrid is not None else None,
        )

    def explain(self) -> str:
        """The non-zero components, e.g. "text 1.00, vector 0.62, speaker 1.00" (for logs and debugging)."""
        parts = [f"{name} {value:.2f}" for name, value in self.components.as_dict().items() if value]
        return f"{self.score:.3f} = " + ", ".join(parts)
