"""The second stage of search: re-rank the hybrid score's best candidates with what they say about each other.

The hybrid score (`public.memory_search`) judges each fact alone. The evidence for a question clusters: the
answer sits in a session beside other turns about the same thing, and a turn is often the reply to the one
before it. So each candidate also gets:

- `rank`: 1 / log2(2 + its place in the hybrid order) (the order itself, not only the score's size);
- `session`, `session_rank`: the relative hybrid score and the rank weight of the best *other* candidate of its
  session (evidence clusters in time);
- `adjacent`, `adjacent_rank`: the same for the candidate just before or after it in its session;
- `entity`: the share of the names and numbers the question holds (capitalised words, digits) found in the text;
- `session_best`: the relative hybrid score of the best candidate of its session, itself included (the
  session-level view: a turn of the session that answers best, ranked inside it).

A question that asks for several things ("What books…", "How many…", "… and …": `asks_for_several`) is ranked
without `session_best` (`RERANK_WEIGHTS_SEVERAL`): its evidence is spread over sessions.

The final score is a linear combination of these and of the hybrid score's own parts (`RERANK_WEIGHTS`), fit by
logistic regression on LoCoMo's development split and measured by cross-validation across conversations
(`python -m bench.locomo_rerank`, whose table is in docs/retrieval.md). Pure: no store, no I/O.

`public.memory_search` repeats this reranking in SQL, input for input and in the same arithmetic (so that a
search sends its 10 rows rather than 100 to be reranked here); the stores without SQL call `rerank_hits`.
`tests/test_rerank_sql.py` holds the two to the same order and scores.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..text import normalize_key
from .scored import ScoredMemory

__all__ = [
    "RERANK_FEATURES",
    "RERANK_WEIGHTS",
    "RERANK_WEIGHTS_SEVERAL",
    "RerankQuery",
    "asks_for_several",
    "question_entities",
    "rerank",
    "rerank_features",
    "rerank_hits",
    "rerank_query",
]

RERANK_FEATURES = (
    "hybrid",
    "text",
    "vector",
    "neighbour",
    "speaker",
    "date",
    "time",
    "rank",
    "session",
    "session_rank",
    "adjacent",
    "adjacent_rank",
    "entity",
    "session_best",
)
"""The reranker's inputs, in the order of `RERANK_WEIGHTS` (`hybrid`: the hybrid score / the best one's)."""

RERANK_WEIGHTS: Mapping[str, float] = {
    "hybrid": 3.105,
    "text": 0.211,
    "vector": 0.516,
    "neighbour": -0.398,
    "speaker": 1.509,
    "date": 0.739,
    "time": 0.602,
    "rank": 1.944,
    "session": -1.969,
    "session_rank": 0.780,
    "adjacent": 0.445,
    "adjacent_rank": 1.622,
    "entity": 0.765,
    "session_best": 5.184,
}
"""The coefficients (`python -m bench.locomo_rerank --fit --candidates 100 --channels 150` prints them from the
development split, over the candidates as `memory_search` takes them)."""

RERANK_WEIGHTS_SEVERAL: Mapping[str, float] = {
    "hybrid": 3.685,
    "text": 0.980,
    "vector": 1.116,
    "neighbour": -0.195,
    "speaker": 1.621,
    "date": 0.861,
    "time": 0.615,
    "rank": 2.576,
    "session": -0.498,
    "session_rank": 1.581,
    "adjacent": 0.679,
    "adjacent_rank": 1.208,
    "entity": 0.672,
}
"""The coefficients for a question that asks for several things (`asks_for_several`): the same inputs but
`session_best`, fit on every question. Its evidence is spread over sessions, and the best session's other turns
push the second and third pieces down: cross-validated multi-hop recall@10 0.491 → 0.506 (categories 1–4
0.802 → 0.804) against one set of weights for every question (docs/retrieval.md)."""

_WORD = re.compile(r"[\w'’-]+")
_NAME_OR_NUMBER = re.compile(r"(?:[A-ZÁÉÍÓÚÑ][\w'’-]+|\d[\d.,:]*)")
# Capitalised words that are not names: question words and auxiliaries that open a question (English, Spanish).
_NOT_NAME_WORDS = (
    "what when where who whom whose which why how did does do is are was were has have had can could would will"
    " should shall may might must if in on at the a an and or but for to of from with by about i"
    " qué que cuándo cuando dónde donde quién quien quiénes cuál cual cuáles cómo como cuánto cuántos por"
    " para el la los las un una y o en de del con es son fue era"
)
_NOT_NAMES = frozenset(normalize_key(w) for w in _NOT_NAME_WORDS.split())


def question_entities(question: str) -> tuple[str, ...]:
    """The names and numbers `question` holds, case- and accent-folded ("When did Caroline go to Paris in
    2023?" → caroline, paris, 2023), without a possessive 's."""
    found: list[str] = []
    for word in _WORD.findall(question):
        if not _NAME_OR_NUMBER.fullmatch(word):
            continue
        key = normalize_key(re.sub(r"['’]s$", "", word))
        if key and key not in _NOT_NAMES:
            found.append(key)
    return tuple(dict.fromkeys(found))


# A question that asks for several things: "how many", "both", "what books…", "which cities…", "what … and …".
_NOT_PLURAL = "is was has does this its his hers yours ours theirs us as always sometimes besides perhaps"
_PLURAL_ASK = re.compile(
    r"\b(?:how many|both|kinds of|types of|sorts of|things|ways"
    r"|(?:what|which)(?: \w+)? (?!(?:" + _NOT_PLURAL.replace(" ", "|") + r")\b)\w{3,}s)\b"
)
_WH_AND = re.compile(r"^\s*(?:what|which|who|where)\b.*\band\b")


def asks_for_several(question: str) -> bool:
    """Whether `question` asks for several things ("What books has Melanie read?", "How many times…",
    "Where did Caroline and Melanie travel?"): their evidence is spread over sessions, so the reranker
    ranks them without `session_best` (`RERANK_WEIGHTS_SEVERAL`). English only."""
    folded = question.casefold()
    return bool(_PLURAL_ASK.search(folded) or _WH_AND.search(folded))


@dataclass(frozen=True, slots=True)
class RerankQuery:
    """What the reranker needs of a question, as a store receives it (`SearchQuery.rerank`): `public.memory_search`
    reranks in SQL with it, the stores without SQL with `rerank_hits`."""

    weights: tuple[float, ...]
    """The coefficients, one per input of `RERANK_FEATURES`, in that order."""
    entities: tuple[str, ...]
    """The names and numbers the question holds (`question_entities`)."""
    pool: int
    """How many of the hybrid order's best are reranked."""


def rerank_query(
    question: str,
    pool: int,
    weights: Mapping[str, float] = RERANK_WEIGHTS,
    several: Mapping[str, float] | None = RERANK_WEIGHTS_SEVERAL,
) -> RerankQuery:
    """The reranking of `question`'s best `pool` candidates: by `several` when it asks for several things
    (`asks_for_several`; None: `weights` always), else by `weights` (an input left out weighs 0)."""
    chosen = several if several is not None and asks_for_several(question) else weights
    vector = tuple(float(chosen.get(name, 0.0)) for name in RERANK_FEATURES)
    return RerankQuery(vector, question_entities(question), pool)


def _rank_weight(place: int) -> float:
    # ln(x) / ln(2) rather than log2(x): the formula `memory_search` computes, to the last bit.
    return 1.0 / (math.log(place + 2) / math.log(2))


_RANK_WEIGHT = tuple(_rank_weight(place) for place in range(1001))  # search returns at most 1,000


def rerank_features(question: str, hits: Sequence[ScoredMemory]) -> list[tuple[float, ...]]:
    """The reranker's inputs for each of `hits` (in the hybrid order), in the order of `RERANK_FEATURES`."""
    return _features(question_entities(question), hits)


def _features(entities: tuple[str, ...], hits: Sequence[ScoredMemory]) -> list[tuple[float, ...]]:
    best = max((h.score for h in hits), default=0.0)
    relative = [h.score / best if best > 0 else 0.0 for h in hits]
    # Keyed by the ids' integers: a UUID hashes in Python (uuid.__hash__), 400 times a search, a fifth of this.
    rank_of: dict[int, int] = {}
    # The best (lowest) two ranks per session: a candidate's best *other* is the second when it is the first.
    session_best: dict[str, list[int]] = {}
    following: dict[int, int] = {}
    for i, h in enumerate(hits):
        memory = h.memory
        rank_of[memory.id.int] = i
        if memory.session_id is not None:
            ranks = session_best.setdefault(memory.session_id, [])
            if len(ranks) < 2:
                ranks.append(i)
        if h.previous_id is not None:
            following[h.previous_id.int] = i
    out: list[tuple[float, ...]] = []
    for i, h in enumerate(hits):
        memory = h.memory
        other = None
        if memory.session_id is not None:
            first = session_best[memory.session_id]
            other = first[0] if first[0] != i else (first[1] if len(first) > 1 else None)
        before = rank_of.get(h.previous_id.int) if h.previous_id is not None else None
        after = following.get(memory.id.int)
        nearest = before if after is None else after if before is None else min(before, after)
        c = h.components
        best_in_session = max(relative[i], relative[other]) if other is not None else relative[i]
        out.append(
            (
                relative[i],
                c.text,
                c.vector,
                c.neighbour,
                c.speaker,
                c.date,
                c.time,
                _RANK_WEIGHT[i],
                relative[other] if other is not None else 0.0,
                _RANK_WEIGHT[other] if other is not None else 0.0,
                max(relative[before] if before is not None else 0.0, relative[after] if after is not None else 0.0),
                _RANK_WEIGHT[nearest] if nearest is not None else 0.0,
                _entity_share(entities, memory.content) if entities else 0.0,
                best_in_session,
            )
        )
    return out


@functools.lru_cache(maxsize=256)
def _name_pattern(entity: str) -> re.Pattern[str]:
    return re.compile(r"\b" + re.escape(entity) + r"\b")


def _entity_share(entities: tuple[str, ...], content: str) -> float:
    """The share of `entities` (not empty) each found as a whole word in `content`, folded (what `memory_search`
    computes with `~ '\\m<name>\\M'` on the unaccented, lower-cased text)."""
    folded = normalize_key(content)
    return sum(1 for entity in entities if _name_pattern(entity).search(folded)) / len(entities)


def rerank(
    question: str,
    hits: Sequence[ScoredMemory],
    limit: int,
    weights: Mapping[str, float] = RERANK_WEIGHTS,
    several: Mapping[str, float] | None = RERANK_WEIGHTS_SEVERAL,
) -> list[ScoredMemory]:
    """`hits` (the hybrid order, best first) re-ranked for `question`, the best `limit`, by `weights`, or by
    `several` when the question asks for several things (`asks_for_several`; None: `weights` always). Each hit
    keeps its hybrid score in `hybrid` and gets the reranker's as `score`, its inputs in `components`."""
    return rerank_hits(hits, rerank_query(question, len(hits), weights, several), limit)


def rerank_hits(hits: Sequence[ScoredMemory], query: RerankQuery, limit: int) -> list[ScoredMemory]:
    """`hits` (the hybrid order, best first; all of them, `query.pool` is the caller's cut) re-ranked by
    `query`, the best `limit`: what `public.memory_search` does in SQL, for the stores without it."""
    w = query.weights
    features = _features(query.entities, hits)
    # sum over map(mul): the same additions in the same order as a generator, in C (a fifth of the reranker).
    scores = [sum(map(operator.mul, w, f)) for f in features]
    order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:limit]  # ties keep the hybrid order
    out: list[ScoredMemory] = []
    for i in order:
        hit, f = hits[i], features[i]
        # session, adjacent and entity are the 9th, 11th and 13th inputs (RERANK_FEATURES).
        components = dataclasses.replace(hit.components, session=f[8], adjacent=f[10], entity=f[12])
        out.append(ScoredMemory(hit.memory, scores[i], components, hit.previous_id, hybrid=hit.score))
    return out
