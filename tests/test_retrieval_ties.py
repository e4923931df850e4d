"""Ties in search: equally good facts rank the same on every run (never by their random ids), and the text
channel leaves out the facts tied with its last place when they would not all fit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

from memory_plugin import MemoryManager, Note
from memory_plugin.retrieval import SearchQuery, analyze_query
from memory_plugin.retrieval.weights import SearchWeights

_DAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


async def test_equal_facts_rank_newest_first_then_in_the_order_they_were_stored(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    # The same words said eight times (different turns: not merged), six of them on the same day.
    said = [(_DAY + timedelta(days=2), "b"), (_DAY + timedelta(days=1), "c"), *((_DAY, t) for t in "adefgh")]
    notes = [Note(content="Melanie ran a charity race.", occurred_at=when, metadata={"turn": t}) for when, t in said]
    rankings = []
    for user in (user_id, uuid4()):  # two users, the same notes stored the same way: new random ids
        await any_memory.remember_many(user, notes)
        hits = await any_memory.search(user, "charity race", limit=8)
        assert len({h.hybrid for h in hits}) == 1  # one hybrid score: the order is the tie-break alone
        rankings.append([h.memory.metadata["turn"] for h in hits])

    assert rankings[0][:2] == ["b", "c"]  # the newest first
    assert rankings[0] == rankings[1]  # then the order they were stored in, never their random ids


async def test_the_text_channel_leaves_out_the_facts_tied_with_its_last_place(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    await pg_memory.remember_many(
        user_id,
        [
            Note(content="The charity race marathon was on Sunday."),
            Note(content="A charity race in town."),
            *(Note(content=f"Gave to charity, number {n}.") for n in range(3)),  # tied: "charity" alone
        ],
    )
    question = "charity race marathon"

    # Text only (no vector channel), three candidates: the three tied facts would take the last place at random.
    hits = await pg_memory._searcher.store.search(
        user_id,
        SearchQuery(
            text=question,
            limit=3,
            weights=SearchWeights(candidates=3, rerank_candidates=0),
            analysis=analyze_query(question),
        ),
    )

    assert [h.memory.content for h in hits] == ["The charity race marathon was on Sunday.", "A charity race in town."]
