"""What a store needs to run a search (`SearchQuery`), and the search in Python for the stores that have no
SQL (`InMemoryStore`, and `ResilientStore` answering from its cache while the database is down).

The Python ranking keeps the formula of `public.memory_search` with simpler signals, documented here:
- text: the share of the question's words (accent- and case-folded, a few stop words dropped, compared on
  their first 5 letters as a crude stem) found in the fact, normalised by the best candidate's, instead of
  ts_rank over English and Spanish stems;
- vector: exact cosine over every fact embedded with the same model (no index);
- neighbour: the previous and next fact of the same session, in insertion order, as in SQL;
- trigram: not computed (0).
Speaker, date, time, importance, confidence and recency are computed as in SQL.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple
from uuid import UUID

from pydantic import TypeAdapter, ValidationError

from ..quality.semantic import cosine_similarity
from ..rows import MemoryRecord
from ..text import normalize_key
from .query import QueryAnalysis
from .rerank import RerankQuery, rerank_hits
from .scored import ScoreComponents, ScoredMemory
from .weights import SearchWeights

__all__ = [
    "BacklogItem",
    "EmbeddingUpdate",
    "SearchQuery",
    "StoredVector",
    "record_from_json",
    "record_from_json_text",
    "score_in_python",
    "search_params",
]

_WORD = re.compile(r"[\w']+")
_STOP_WORDS = (
    "a an and are as at be by did do does for from had has have he her his how i in is it its me my of on or"
    " our she so that the their them they this to was we were what when where which who why will with you"
    " your el la los las un una y o de del en que qué con por para es son se su sus lo al le les mi cual"
    " cuál como cómo cuando cuándo donde dónde"
)
_STOP = frozenset(normalize_key(w) for w in _STOP_WORDS.split())
TIME_EXPRESSION = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|last|next|ago|weekend|recently|lately|soon|"
    r"(mon|tues|wednes|thurs|fri|satur|sun)day|week|month|year|january|february|march|april|may|june|july|"
    r"august|september|october|november|december|ayer|hoy|manana|semana|mes|ano|pasado|proximo|hace|lunes|"
    r"martes|miercoles|jueves|viernes|sabado|domingo|[12][0-9]{3})s?\b"
)
"""Time expressions (English, Spanish; matched on accent-folded lower case), as in `memory_search`."""


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """One search, as handed to `LongTermStore.search`."""

    text: str
    """The question."""
    limit: int = 10
    """Hits to return."""
    embedding: tuple[float, ...] | None = None
    """The question's embedding (None: text signals only)."""
    model: str | None = None
    """The model of `embedding`; only facts embedded by it are compared."""
    weights: SearchWeights = field(default_factory=SearchWeights)
    """Weights and limits."""
    analysis: QueryAnalysis = field(default_factory=QueryAnalysis)
    """Dates and "when" found in the question."""
    now: datetime | None = None
    """Validity and recency are computed at this time (`now()` when None)."""
    rerank: RerankQuery | None = None
    """Rerank the hybrid order's best `rerank.pool` and return the best `limit` of them (None: the hybrid order)."""


@functools.cache
def _vector_format(dimensions: int) -> str:
    return "[" + ",".join(["%.9g"] * dimensions) + "]"


def vector_literal(values: Sequence[float]) -> str:
    """`values` as pgvector's text input. Nine significant digits carry a float32 (the `vector` type) to
    within its last bit, and the search compares in half precision; one format call is a third of the time
    of `repr` per number (0.05 ms against 0.16 for 384 dimensions), which every search pays."""
    return _vector_format(len(values)) % tuple(values)


def search_params(user_id: UUID, query: SearchQuery) -> dict[str, Any]:
    """`public.memory_search`'s named arguments for `query`, as JSON values: PostgREST's RPC body, and the
    Postgres store's named arguments (with casts)."""
    w = query.weights
    params: dict[str, Any] = {
        "p_user_id": str(user_id),
        "p_query": query.text,
        "p_embedding": vector_literal(query.embedding) if query.embedding is not None else None,
        "p_model": query.model if query.embedding is not None else None,
        "p_limit": query.limit,
        "p_candidates": w.candidates,
        "p_weight_text": w.text,
        "p_weight_vector": w.vector,
        "p_weight_neighbour": w.neighbour,
        "p_weight_trigram": w.trigram,
        "p_weight_speaker": w.speaker,
        "p_weight_date": w.date,
        "p_weight_time": w.time,
        "p_weight_importance": w.importance,
        "p_weight_confidence": w.confidence,
        "p_weight_recency": w.recency,
        "p_recency_window_days": w.recency_window_days,
        "p_date_from": [x.start.isoformat() for x in query.analysis.windows],
        "p_date_to": [x.end.isoformat() for x in query.analysis.windows],
        "p_months": list(query.analysis.months),
        "p_asks_when": query.analysis.asks_when,
        "p_date_slack_days": w.date_slack_days,
        "p_exact_scan_below": w.exact_scan_below,
        "p_text_scan_limit": w.text_scan_limit,
    }
    if query.now is not None:  # omitted: the function's default, now()
        params["p_now"] = query.now.isoformat()
    if query.rerank is not None:  # omitted: the hybrid order
        params["p_rerank_weights"] = list(query.rerank.weights)
        params["p_entities"] = list(query.rerank.entities)
        params["p_rerank_pool"] = query.rerank.pool
    return params


def record_from_json(row: Mapping[str, Any]) -> MemoryRecord:
    """A `user_memory` row as JSON (`to_jsonb`, PostgREST) as a `MemoryRecord`."""
    return MemoryRecord.from_row(row)


def record_from_json_text(text: str | bytes) -> MemoryRecord:
    """A `user_memory` row's `to_jsonb` as text, parsed and validated in one pass: a third of the time of
    `json.loads` then `record_from_json`. A row with a null collection (which `record_from_json` reads as
    empty) takes that slower way."""
    try:
        return _RECORD_JSON.validate_json(text)
    except ValidationError:
        return record_from_json(json.loads(text))


_RECORD_JSON = TypeAdapter(MemoryRecord)


def _words(text: str) -> set[str]:
    return {w[:5] for w in _WORD.findall(normalize_key(text)) if w not in _STOP and len(w) > 1}


def _date_score(occurred: datetime | None, analysis: QueryAnalysis, slack_days: float) -> float:
    if occurred is None:
        return 0.0
    best = 1.0 if occurred.month in analysis.months else 0.0
    for window in analysis.windows:
        if window.start <= occurred < window.end:
            return 1.0
        distance = min(abs((occurred - window.start).total_seconds()), abs((occurred - window.end).total_seconds()))
        best = max(best, 1.0 - distance / 86400.0 / max(slack_days, 1e-6))
    return best


def _names_speaker(question: str, speaker: str) -> bool:
    return re.search(rf"\b{re.escape(speaker)}\b", question) is not None


class StoredVector(NamedTuple):
    """A fact's embedding as a store keeps it (`public.memory_search_docs`: the vector beside its text)."""

    model: str
    """The embedding model."""
    vector: tuple[float, ...]
    """The embedding."""
    text: str
    """The text it was computed from (a vector of an older text is never compared)."""


def score_in_python(
    records: Sequence[MemoryRecord],
    query: SearchQuery,
    embeddings: Mapping[UUID, StoredVector] | None = None,
) -> list[ScoredMemory]:
    """Rank `records` (one user's rows, in insertion order) for `query`; `embeddings` maps a row id to its
    vector. Only valid, unexpired facts are returned; see the module docstring for the signals. With
    `query.rerank`, the best `rerank.pool` are reranked as `memory_search` does (`rerank_hits`)."""
    now = query.now or datetime.now(UTC)
    w = query.weights
    embeddings = embeddings or {}
    question = normalize_key(query.text)
    q_words = _words(query.text)
    facts = [r for r in records if r.kind == "fact" and r.is_current(now)]

    def vector(record: MemoryRecord | None) -> float:
        if record is None or query.embedding is None:
            return 0.0
        stored = embeddings.get(record.id)
        if stored is None or stored.model != query.model or stored.text != record.content:
            return 0.0
        return cosine_similarity(query.embedding, stored.vector)

    previous: dict[UUID, MemoryRecord] = {}
    following: dict[UUID, MemoryRecord] = {}
    last_in_session: dict[str, MemoryRecord] = {}
    for record in records:
        if record.kind != "fact" or record.session_id is None:
            continue
        before = last_in_session.get(record.session_id)
        if before is not None:
            previous[record.id] = before
            following[before.id] = record
        last_in_session[record.session_id] = record

    speakers = {normalize_key(str(r.metadata.get("speaker") or "")) for r in facts} - {""}
    named = {s for s in speakers if _names_speaker(question, s)}
    text_raw = {r.id: len(q_words & _words(r.content)) / len(q_words) if q_words else 0.0 for r in facts}
    best_text = max(text_raw.values(), default=0.0)
    window_s = max(w.recency_window_days * 86400.0, 1e-9)
    hits: list[ScoredMemory] = []
    for r in facts:
        speaker = normalize_key(str(r.metadata.get("speaker") or ""))
        parts = ScoreComponents(
            text=text_raw[r.id] / best_text if best_text else 0.0,
            vector=vector(r),
            neighbour=max(vector(previous.get(r.id)), vector(following.get(r.id))),
            speaker=1.0 if len(named) == 1 and speaker in named else 0.0,
            date=_date_score(r.occurred_at, query.analysis, w.date_slack_days),
            time=1.0 if query.analysis.asks_when and TIME_EXPRESSION.search(normalize_key(r.content)) else 0.0,
            importance=r.importance / 5.0,
            confidence=r.confidence,
            recency=min(1.0, max(0.0, 1.0 - (now - r.last_reinforced_at).total_seconds() / window_s)),
        )
        score = (
            w.text * parts.text
            + w.vector * parts.vector
            + w.neighbour * parts.neighbour
            + w.speaker * parts.speaker
            + w.date * parts.date
            + w.time * parts.time
            + w.importance * parts.importance
            + w.confidence * parts.confidence
            + w.recency * parts.recency
        )
        prev = previous.get(r.id)
        hits.append(ScoredMemory(memory=r, score=score, components=parts, previous_id=prev.id if prev else None))
    # Ties as memory_search breaks them: the newer fact, then the later-stored one; never the random id.
    stored = {r.id: n for n, r in enumerate(facts)}
    hits.sort(
        key=lambda h: (
            -h.score,
            -h.memory.last_reinforced_at.timestamp(),
            -h.memory.occurred_at.timestamp() if h.memory.occurred_at is not None else math.inf,
            -stored[h.memory.id],
        )
    )
    if query.rerank is not None:
        return rerank_hits(hits[: max(query.limit, query.rerank.pool)], query.rerank, query.limit)
    return hits[: query.limit]


@dataclass(frozen=True, slots=True)
class EmbeddingUpdate:
    """A vector for one of the user's facts, found by `content_hash` (`LongTermStore.set_embeddings`)."""

    content_hash: str
    """The fact's `content_hash`."""
    content: str
    """The text that was embedded; ignored if the fact's text has changed since."""
    embedding: tuple[float, ...]
    """The vector."""


@dataclass(frozen=True, slots=True)
class BacklogItem:
    """A fact without a vector of the current model (`LongTermStore.embedding_backlog`)."""

    memory_id: UUID
    """The fact's row id."""
    content_hash: str
    """Its `content_hash`."""
    content: str
    """The text to embed."""
