"""The reranker's order and scores equal those of its plain formulation (the one written as the docstring of
`rerank.py` reads: UUID-keyed maps, a regex per candidate, a generator sum), on many random candidate lists:
its speed-ups (integer keys, `sum(map(mul))`) never change a ranking. And a search row's record is read in one
pass as it is."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

from memory_plugin.retrieval import ScoreComponents, ScoredMemory
from memory_plugin.retrieval.rerank import (
    RERANK_FEATURES,
    RERANK_WEIGHTS,
    RERANK_WEIGHTS_SEVERAL,
    asks_for_several,
    question_entities,
    rerank,
    rerank_features,
)
from memory_plugin.retrieval.search import record_from_json_text
from memory_plugin.rows import MemoryRecord
from memory_plugin.text import normalize_key

_AT = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
_NAMES = ["Caroline", "Melanie", "Paris", "2023", "Jean-Luc", "Jean", "O'Brien", "7:30"]
_WORDS = ["went", "to", "the", "support", "group", "yesterday", "painted", "a", "sunrise", "and", "in", "caroline's"]
_QUESTIONS = [
    "When did Caroline go to the LGBTQ support group?",
    "What books has Melanie read?",
    "How many times did Caroline and Melanie meet in Paris in 2023?",
    "Where did Jean-Luc meet O'Brien at 7:30?",
    "what did she paint?",
    "Which cities has Jean visited?",
]


def _reference_features(question: str, hits: Sequence[ScoredMemory]) -> list[tuple[float, ...]]:
    best = max((h.score for h in hits), default=0.0)
    relative = [h.score / best if best > 0 else 0.0 for h in hits]
    rank_of = {h.memory.id: i for i, h in enumerate(hits)}
    sessions: dict[str, list[int]] = {}
    following: dict[UUID, int] = {}
    for i, h in enumerate(hits):
        if h.memory.session_id is not None:
            ranks = sessions.setdefault(h.memory.session_id, [])
            if len(ranks) < 2:
                ranks.append(i)
        if h.previous_id is not None:
            following[h.previous_id] = i
    entities = question_entities(question)
    weight = [1.0 / (math.log(rank + 2) / math.log(2)) for rank in range(len(hits))]
    out: list[tuple[float, ...]] = []
    for i, h in enumerate(hits):
        other = None
        if h.memory.session_id is not None:
            first = sessions[h.memory.session_id]
            other = first[0] if first[0] != i else (first[1] if len(first) > 1 else None)
        before = rank_of.get(h.previous_id) if h.previous_id is not None else None
        after = following.get(h.memory.id)
        nearest = before if after is None else after if before is None else min(before, after)
        c = h.components
        out.append(
            (
                relative[i], c.text, c.vector, c.neighbour, c.speaker, c.date, c.time, weight[i],
                relative[other] if other is not None else 0.0,
                weight[other] if other is not None else 0.0,
                max(relative[before] if before is not None else 0.0, relative[after] if after is not None else 0.0),
                weight[nearest] if nearest is not None else 0.0,
                sum(1 for e in entities if re.search(rf"\b{re.escape(e)}\b", normalize_key(h.memory.content)))
                / len(entities) if entities else 0.0,
                max(relative[i], relative[other]) if other is not None else relative[i],
            )
        )  # fmt: skip
    return out


def _reference_order(question: str, hits: Sequence[ScoredMemory], limit: int) -> list[tuple[UUID, float]]:
    chosen: Mapping[str, float] = RERANK_WEIGHTS_SEVERAL if asks_for_several(question) else RERANK_WEIGHTS
    w = [chosen.get(name, 0.0) for name in RERANK_FEATURES]
    scores = [sum(a * b for a, b in zip(w, f, strict=True)) for f in _reference_features(question, hits)]
    order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:limit]
    return [(hits[i].memory.id, scores[i]) for i in order]


def _random_hits(rng: random.Random, n: int) -> list[ScoredMemory]:
    hits: list[ScoredMemory] = []
    last_of: dict[str | None, UUID] = {}
    for i in range(n):
        session = rng.choice([None, *(f"s{k}" for k in range(n // 6 + 1))])
        # Now and then a long text (a note): past the length the entity shares are cached for.
        words = rng.choices(_WORDS + _NAMES, k=rng.randint(3, 14) if rng.random() < 0.95 else 900)
        record = MemoryRecord(
            id=UUID(int=rng.getrandbits(128)), user_id=UUID(int=1), kind="fact", category="fact",
            content=" ".join(words), confidence=1.0, source="explicit", importance=3, relevance_count=0,
            source_message_ids=(), session_id=session, attributes={}, content_hash=str(i), created_at=_AT,
            updated_at=_AT, last_reinforced_at=_AT, occurred_at=_AT,
        )  # fmt: skip
        # A previous turn among the candidates, one that is not, or none.
        previous = last_of.get(session) if session is not None and rng.random() < 0.7 else None
        if previous is None and rng.random() < 0.2:
            previous = UUID(int=rng.getrandbits(128))
        parts = {name: rng.choice([0.0, rng.random()]) for name in ("text", "vector", "neighbour", "date", "time")}
        components = ScoreComponents(**parts, speaker=float(rng.random() < 0.3))
        # Equal scores now and then: ties must keep the hybrid order.
        score = round(rng.uniform(0.2, 2.0), 1 if rng.random() < 0.3 else 6)
        hits.append(ScoredMemory(record, score, components, previous))
        if session is not None:
            last_of[session] = record.id
    hits.sort(key=lambda h: -h.score)
    return hits


def test_the_reranker_orders_and_scores_as_its_plain_formulation() -> None:
    rng = random.Random(26)
    for case in range(300):
        question = _QUESTIONS[case % len(_QUESTIONS)]
        hits = _random_hits(rng, rng.choice([0, 1, 5, 40, 100]))
        limit = rng.choice([1, 10, 50, 100])
        got = rerank(question, hits, limit)
        assert [(h.memory.id, h.score) for h in got] == _reference_order(question, hits, limit)
        assert rerank_features(question, hits) == _reference_features(question, hits)


def test_a_search_row_record_is_the_row_as_it_is() -> None:
    row = {
        "id": str(UUID(int=7)), "user_id": str(UUID(int=1)), "kind": "fact", "category": "fact",
        "content": "Caroline: hi", "confidence": 0.6, "source": "explicit", "importance": 3, "relevance_count": 0,
        "source_message_ids": [], "session_id": "s1", "attributes": {}, "content_hash": "h",
        "created_at": _AT.isoformat(), "updated_at": _AT.isoformat(), "last_reinforced_at": _AT.isoformat(),
        "metadata": {"speaker": "Caroline"},
    }  # fmt: skip
    first = record_from_json_text(json.dumps(row))
    assert record_from_json_text(json.dumps(row)) == first
    # A changed row reads as changed.
    later = _AT + timedelta(hours=1)
    changed = {**row, "content": "Caroline: hello", "updated_at": later.isoformat()}
    again = record_from_json_text(json.dumps(changed))
    assert (again.content, again.updated_at) == ("Caroline: hello", later)
    # A long row (a note) reads the same way.
    long = {**row, "content": "Caroline: " + "hello " * 1000}
    assert record_from_json_text(json.dumps(long)).content == long["content"]


def test_score_columns_read_as_floats_a_null_or_missing_one_as_zero() -> None:
    row: dict[str, object] = {f"{name}_score": 0.5 for name in ScoreComponents.__dataclass_fields__}
    del row["session_score"], row["adjacent_score"], row["entity_score"]  # a row without the reranker's inputs
    row["speaker_score"] = None
    row["date_score"] = 1  # a JSON integer (PostgREST)
    parts = ScoreComponents.from_row(row)
    assert (parts.text, parts.speaker, parts.date, parts.session) == (0.5, 0.0, 1.0, 0.0)
    assert type(parts.date) is float
    del row["recency_score"]
    assert ScoreComponents.from_row(row) == dataclasses.replace(parts, recency=0.0)
