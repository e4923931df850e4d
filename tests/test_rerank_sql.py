"""`public.memory_search` reranks as `retrieval/rerank.py` does: the same hits, in the same order, with the same
scores and inputs as the Python reranker (what the stores without SQL run) applied to the same database's hybrid
order. The facts are meant to stress what the reranker looks at: sessions whose best turns are far apart,
turns answering the one before, notes without a session, names with accents, hyphens, apostrophes and digits."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from postgrest_transport import supabase_store

from memory_plugin import MemoryManager, Note
from memory_plugin.errors import MemoryPluginError
from memory_plugin.retrieval import ScoredMemory, SearchQuery, SearchWeights, analyze_query
from memory_plugin.retrieval.rerank import (
    RERANK_WEIGHTS,
    RERANK_WEIGHTS_SEVERAL,
    RerankQuery,
    rerank_hits,
    rerank_query,
)

_DAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
_NOW = datetime(2023, 9, 1, tzinfo=UTC)  # recency is computed at a fixed time: both searches see the same scores
_SPEAKERS = ["Caroline", "Melanie", "Jean-Luc", "José", "Zoë O'Brien"]
_WORDS = [
    "went", "to", "the", "support", "group", "yesterday", "painted", "a", "sunrise", "lake", "kids", "pottery",
    "class", "charity", "race", "7:30", "2023", "Paris", "camping", "trip", "book", "read", "adoption", "agency",
    "counselling", "JOSÉ", "zoe", "café", "piano", "guitar", "concert",
]  # fmt: skip
_QUESTIONS = [
    "When did Caroline go to the support group?",
    "What books has Melanie read?",
    "How many times did Jean-Luc and José meet in Paris in 2023?",
    "Where did Zoë O'Brien go camping?",
    "what did she paint at 7:30?",
    "Which concerts has Caroline been to?",
    "pottery",
]


def _notes(rng: random.Random) -> list[Note]:
    notes: list[Note] = []
    for session in range(14):
        when = _DAY + timedelta(days=7 * session)
        for turn in range(rng.randint(4, 12)):
            speaker = rng.choice(_SPEAKERS)
            words = " ".join(rng.choices(_WORDS, k=rng.randint(4, 16)))
            notes.append(
                Note(
                    content=f"{speaker}: {words}",
                    session_id=f"session-{session}",
                    occurred_at=when + timedelta(minutes=turn),
                    metadata={"speaker": speaker, "turn": f"{session}:{turn}"},
                )
            )
    # Notes outside any session: no neighbours, no session of their own.
    notes += [Note(content=f"{rng.choice(_SPEAKERS)} likes {' '.join(rng.choices(_WORDS, k=6))}") for _ in range(8)]
    return notes


def _comparable(hits: list[ScoredMemory]) -> list[tuple[object, ...]]:
    return [(h.memory.id, h.score, h.hybrid, h.components, h.previous_id) for h in hits]


async def test_the_database_reranks_as_the_python_reranker_does(pg_memory: MemoryManager, user_id: UUID) -> None:
    await pg_memory.remember_many(user_id, _notes(random.Random(31)))
    embedder, store = pg_memory.embedder, pg_memory.store  # what the manager's searches use
    assert embedder is not None  # the vector and neighbour inputs are part of the comparison
    compared = 0
    for question in _QUESTIONS:
        embedding = await embedder.embed_query(question)
        for pool, limit in ((100, 10), (100, 50), (20, 1), (30, 30)):
            hybrid_query = SearchQuery(
                text=question,
                limit=pool,
                embedding=embedding,
                model=embedder.name,
                weights=SearchWeights.from_settings(pg_memory.settings),
                analysis=analyze_query(question),
                now=_NOW,
            )
            hybrid = await store.search(user_id, hybrid_query)
            reranking = rerank_query(question, pool, RERANK_WEIGHTS, RERANK_WEIGHTS_SEVERAL)
            want = rerank_hits(hybrid, reranking, limit)

            got = await store.search(user_id, dataclasses.replace(hybrid_query, limit=limit, rerank=reranking))

            assert _comparable(got) == _comparable(want), (question, pool, limit)
            compared += len(got)
    assert compared > 300
    # The reranker changed something: the comparison is not of two hybrid orders.
    hits = await pg_memory.search(user_id, _QUESTIONS[0], limit=10)
    assert all(h.hybrid is not None for h in hits)
    assert any(h.score != h.hybrid for h in hits)


async def test_the_supabase_store_sends_the_reranking_through_postgrest(
    pg_memory: MemoryManager, user_id: UUID, database_url: str
) -> None:
    await pg_memory.remember_many(user_id, _notes(random.Random(7)))
    embedder = pg_memory.embedder
    assert embedder is not None
    question = _QUESTIONS[2]  # names, a number, "how many": the second set of weights
    query = SearchQuery(
        text=question,
        limit=10,
        embedding=await embedder.embed_query(question),
        model=embedder.name,
        weights=SearchWeights.from_settings(pg_memory.settings),
        analysis=analyze_query(question),
        now=_NOW,
        rerank=rerank_query(question, 100, RERANK_WEIGHTS, RERANK_WEIGHTS_SEVERAL),
    )
    through_postgrest = supabase_store(database_url)

    try:
        got = await through_postgrest.search(user_id, query)
    finally:
        await through_postgrest.close()

    assert _comparable(got) == _comparable(await pg_memory.store.search(user_id, query))
    assert len(got) == 10


async def test_the_names_are_found_whole_accent_and_case_insensitively(pg_memory: MemoryManager, user_id: UUID) -> None:
    await pg_memory.remember_many(
        user_id,
        [
            Note(content="JOSÉ met Zoë at 7:30 in Paris", session_id="a"),
            Note(content="Josefina met Zoey in Parisian cafés", session_id="b"),  # the names only as parts of words
            Note(content="Jean-Luc and O'Brien went on a trip", session_id="c"),
        ],
    )
    question = "Did José meet Zoë in Paris at 7:30, and Jean-Luc O'Brien?"
    hits = await pg_memory.search(user_id, question, limit=3)

    share = {h.memory.content.split()[0]: h.components.entity for h in hits}
    # jose, zoe, paris, 7, 30, jean-luc, o'brien (the question's names and numbers, folded): 5 of 7, 0, 2 of 7.
    assert share == {"JOSÉ": 5 / 7, "Josefina": 0.0, "Jean-Luc": 2 / 7}


async def test_a_reranking_with_the_wrong_number_of_weights_is_refused(pg_memory: MemoryManager, user_id: UUID) -> None:
    await pg_memory.remember_many(user_id, [Note(content="Caroline went to the support group")])
    query = SearchQuery(text="support group", limit=5, rerank=RerankQuery(weights=(1.0, 2.0), entities=(), pool=10))

    with pytest.raises(MemoryPluginError, match="14 inputs"):
        await pg_memory.store.search(user_id, query)
