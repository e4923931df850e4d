"""The weights of the hybrid search score, and why they have the values they have.

    relevance = text * BM25/best + vector * cosine + neighbour * best neighbour cosine
              + trigram * word_similarity + speaker * [the one person named] + date * [inside a named date]
              + time * ["when" question and a time expression]
    score     = relevance + importance * importance/5 + confidence * confidence + recency * recency

Defaults chosen on LoCoMo's development split (5 conversations, 760 questions of categories 1–4;
`python -m bench.locomo_lab` prints this ladder, each row adding one signal; `bench/locomo.py` runs the real
path), recall@k, all-MiniLM-L6-v2:

| method                                              | R@1   | R@5   | R@10  | R@20  |
|-----------------------------------------------------|------:|------:|------:|------:|
| BM25 (English stems, Spanish and English stop words) | 0.365 | 0.572 | 0.645 | 0.703 |
| vector only                                         | 0.170 | 0.401 | 0.493 | 0.603 |
| reciprocal-rank fusion of the two (k 60)            | 0.290 | 0.537 | 0.635 | 0.734 |
| weighted sum: BM25/best + cosine                    | 0.375 | 0.601 | 0.685 | 0.750 |
| + 0.5 × best neighbour cosine                       | 0.382 | 0.612 | 0.705 | 0.767 |
| + 0.2 × named speaker                               | 0.402 | 0.638 | 0.718 | 0.782 |
| + 0.2 × named date (14-day slack)                   | 0.417 | 0.649 | 0.728 | 0.797 |
| + 0.1 × time expression for "when" questions        | 0.421 | 0.647 | 0.730 | 0.797 |

Other measurements (recall@10, same split): trigram word_similarity at 0.25 or 0.5 on top of text + vector
+0.002 (hence 0 by default: a cost per candidate for nothing measurable); ts_rank instead of BM25 -0.005;
concatenating Spanish stems to the English ones -0.02 (English function words become lexemes); 100
candidates per channel instead of 50, +0.001; BM25's idf scale (= postings read per word) 2000 instead of 500,
-0.002.

This is the first stage: `rerank.py` re-orders the hybrid score's best `rerank_candidates` (100) by how they
cluster (same session, the turn before or after) and the names the question holds, cross-validated recall@10
0.730 → 0.804 on the same split with the candidates `memory_search` returns (each channel's best 150; 0.792 with
50 and no `session_best`; `python -m bench.locomo_rerank --candidates 100 --channels 150`; docs/retrieval.md has
the ablation). The hybrid score's best 100 hold 0.921 of the evidence, its best 50 0.881 (`python -m
bench.locomo_candidates`).

A weighted sum beats reciprocal-rank fusion here because it keeps *how much* better a match is: a turn with
all the rare words of the question and a loose paraphrase are not one rank apart. The fact's own terms
(importance, confidence, recency) are kept small so that a relevant fact beats an important irrelevant one;
they order facts of similar relevance, which is what `get_memory_context(query=…)` needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..settings import MemorySettings

__all__ = ["SearchWeights"]


@dataclass(frozen=True, slots=True)
class SearchWeights:
    """The weights and limits of `MemoryManager.search` (settings `MEMORY_SEARCH_*`)."""

    text: float = 1.0
    """Full-text relevance (BM25, normalised by the best candidate's)."""
    vector: float = 1.0
    """Cosine similarity between the question's and the fact's embeddings."""
    neighbour: float = 0.5
    """Best cosine similarity of the fact just before or after it in the same session."""
    trigram: float = 0.0
    """Trigram word similarity of the question to the text (typos, partial names); 0 = not computed."""
    speaker: float = 0.2
    """Boost of facts whose `metadata.speaker` is the one person the question names."""
    date: float = 0.2
    """Boost of facts stated inside a date the question names (falling to 0 `date_slack_days` away)."""
    time: float = 0.1
    """Boost, for "when" questions, of facts whose text holds a time expression."""
    importance: float = 0.05
    """Weight of importance (1–5, scaled to 0–1)."""
    confidence: float = 0.05
    """Weight of confidence."""
    recency: float = 0.05
    """Weight of recency (1 just reinforced, 0 after `recency_window_days`)."""
    recency_window_days: float = 30.0
    """Age at which recency reaches 0."""
    date_slack_days: float = 14.0
    """How far outside a named date a fact still gets part of the date boost."""
    candidates: int = 150
    """Facts taken from each channel (vector, text, date) before the final ranking (a third as many, at least
    the limit, for a user with `exact_scan_below` facts or more). 150 rather than 50: the reranker's 100 best by
    the hybrid score are then nearly the best 100 of all (cross-validated recall@10 0.796 with 100 per channel,
    0.801 with 150, 0.805 with 250, on LoCoMo dev)."""
    rerank_candidates: int = 100
    """The hybrid score's best this many facts go to the reranker (`rerank.py`); 0: no reranker. 100 rather
    than 50: cross-validated recall@10 0.790 → 0.804 on LoCoMo dev (80: 0.799)."""
    exact_scan_below: int = 5000
    """A user with fewer facts than this gets each channel's `candidates`, the vector channel's by an exact scan;
    above, a third as many, the vector channel's through the HNSW index (iterative scan) unless the user is a
    small share of their partition (then the scan stays exact: `MEMORY_SEARCH_EXACT_SCAN_BELOW`). All five
    LoCoMo dev conversations in one 2,760-fact memory: recall@10 0.793 with 150 per channel, 0.778 with 50."""
    text_scan_limit: int = 500
    """Postings read per question word (bounds the cost of very common words; also BM25's idf scale)."""

    @classmethod
    def from_settings(cls, settings: MemorySettings) -> SearchWeights:
        """The weights configured in `settings`."""
        return cls(
            text=settings.search_weight_text,
            vector=settings.search_weight_vector,
            neighbour=settings.search_weight_neighbour,
            trigram=settings.search_weight_trigram,
            speaker=settings.search_weight_speaker,
            date=settings.search_weight_date,
            time=settings.search_weight_time,
            importance=settings.search_weight_importance,
            confidence=settings.search_weight_confidence,
            recency=settings.search_weight_recency,
            recency_window_days=settings.recency_window_days,
            date_slack_days=settings.search_date_slack_days,
            candidates=settings.search_candidates,
            rerank_candidates=settings.search_rerank_candidates,
            exact_scan_below=settings.search_exact_scan_below,
            text_scan_limit=settings.search_text_scan_limit,
        )
