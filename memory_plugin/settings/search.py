"""Hybrid search: channel weights, candidates and scan bounds (`settings.search`; README "Search and remember").

Weights chosen on LoCoMo's development split; memory_plugin/retrieval/weights.py shows the measurements."""

from __future__ import annotations

from pydantic import Field

from .flat import Flat, SettingsGroup

__all__ = ["SearchNames", "SearchSettings"]


class SearchSettings(SettingsGroup):
    """Hybrid search (`settings.search`): channel weights, candidates, scan bounds, longest question."""

    weight_text: float = Field(default=1.0, ge=0)
    """Full-text relevance (BM25 over English stems, Spanish and English stop words dropped; normalised by the
    best candidate's)."""

    weight_vector: float = Field(default=1.0, ge=0)
    """Cosine similarity of the question's and the fact's embeddings."""

    weight_neighbour: float = Field(default=0.5, ge=0)
    """Best cosine similarity of the fact just before or after it in its session (turns come in pairs)."""

    weight_trigram: float = Field(default=0.0, ge=0)
    """Trigram word similarity (typos, partial names); 0 because it added nothing measurable on LoCoMo
    (+0.002 recall@10) and costs a comparison per candidate."""

    weight_speaker: float = Field(default=0.2, ge=0)
    """Boost of facts whose `metadata["speaker"]` is the one person the question names."""

    weight_date: float = Field(default=0.2, ge=0)
    """Boost of facts stated (`occurred_at`) inside a date the question names ("on 13 October 2023")."""

    weight_time: float = Field(default=0.1, ge=0)
    """Boost, for "when" questions, of facts whose text holds a time expression ("yesterday", "el sábado")."""

    weight_importance: float = Field(default=0.05, ge=0)
    """Weight of importance in the search score (small: relevance first, then importance, confidence and recency)."""

    weight_confidence: float = Field(default=0.05, ge=0)
    """Weight of confidence in the search score."""

    weight_recency: float = Field(default=0.05, ge=0)
    """Weight of recency in the search score (over `recency_window_days`)."""

    date_slack_days: float = Field(default=14.0, gt=0)
    """A fact stated this many days outside a date the question names gets no date boost (linear in between)."""

    candidates: int = Field(default=150, ge=1, le=10_000)
    """Facts taken from each channel (vector, full text, date) before the final ranking (a third as many, at
    least the search's limit, for a user with `exact_scan_below` facts or more)."""

    rerank_candidates: int = Field(default=100, ge=0, le=1000)
    """The hybrid score's best this many facts are re-ranked by how they cluster (same session, neighbouring
    turns) and the names the question holds (`retrieval/rerank.py`); 0 turns the reranker off."""

    exact_scan_below: int = Field(default=5000, ge=0)
    """A user with fewer facts than this gets each channel's `candidates`, the vector channel's by an exact scan;
    above, a third as many from each channel (each candidate costs the ranking more in a large history), the
    vector channel's through the HNSW index unless the user is a small share of their partition of the search
    table: for that choice the threshold grows by `k / (share × ef_search)`, as the index walk must pass over
    the other users' rows (`supabase/schemas/22_memory_search.sql`)."""

    text_scan_limit: int = Field(default=500, ge=1)
    """Postings read per question word: bounds the cost of very common words in a long history."""

    max_chars: int = Field(default=2000, ge=1)
    """Longest question accepted by `search` (longer raises `InvalidMemoryInputError`)."""

    rewrite_model: str | None = None
    """pydantic-ai model name (e.g. `openai:gpt-4o-mini`) asked for up to 3 other phrasings of each question;
    the question and each phrasing are searched and the lists fused (`retrieval/rewrite.py`). One model call per
    search (its latency is added; a failure or a 10 s timeout searches the question alone). Unset: off."""


class SearchNames:
    """The flat names (and `MEMORY_*` variables) of `SearchSettings`' fields."""

    search_weight_text = Flat[float]("search.weight_text")
    search_weight_vector = Flat[float]("search.weight_vector")
    search_weight_neighbour = Flat[float]("search.weight_neighbour")
    search_weight_trigram = Flat[float]("search.weight_trigram")
    search_weight_speaker = Flat[float]("search.weight_speaker")
    search_weight_date = Flat[float]("search.weight_date")
    search_weight_time = Flat[float]("search.weight_time")
    search_weight_importance = Flat[float]("search.weight_importance")
    search_weight_confidence = Flat[float]("search.weight_confidence")
    search_weight_recency = Flat[float]("search.weight_recency")
    search_date_slack_days = Flat[float]("search.date_slack_days")
    search_candidates = Flat[int]("search.candidates")
    search_rerank_candidates = Flat[int]("search.rerank_candidates")
    search_exact_scan_below = Flat[int]("search.exact_scan_below")
    search_text_scan_limit = Flat[int]("search.text_scan_limit")
    max_search_chars = Flat[int]("search.max_chars")
    search_rewrite_model = Flat[str | None]("search.rewrite_model")
