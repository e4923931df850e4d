"""The reranker (`memory_plugin/retrieval/rerank.py`) on small hand-made candidate lists: the turn beside other
evidence, the turn of the date and the turn of the person a question names move up; and `search` uses it on
every backend."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from uuid import UUID, uuid4

from memory_plugin import MemoryManager, Note
from memory_plugin.retrieval import ScoreComponents, ScoredMemory
from memory_plugin.retrieval.rerank import (
    RERANK_FEATURES,
    RERANK_WEIGHTS,
    asks_for_several,
    question_entities,
    rerank,
    rerank_features,
)
from memory_plugin.rows import MemoryRecord

_AT = datetime(2023, 10, 13, 18, 0, tzinfo=UTC)


def _hit(
    content: str,
    score: float,
    *,
    session: str,
    previous: ScoredMemory | None = None,
    **parts: float,
) -> ScoredMemory:
    record = MemoryRecord(
        id=uuid4(), user_id=UUID(int=1), kind="fact", category="fact", content=content, confidence=1.0,
        source="explicit", importance=3, relevance_count=0, source_message_ids=(), session_id=session,
        attributes={}, content_hash=content, created_at=_AT, updated_at=_AT, last_reinforced_at=_AT,
        occurred_at=_AT,
    )  # fmt: skip
    components = ScoreComponents(text=parts.pop("text", 0.3), vector=parts.pop("vector", 0.4), **parts)
    return ScoredMemory(record, score, components, previous.memory.id if previous else None)


def _filler(n: int, top: float = 0.5) -> list[ScoredMemory]:
    """Other candidates, each alone in its session (the reranker sees the hybrid score's best 100)."""
    return [_hit(f"unrelated turn {i}", top - i * 0.01, session=f"other-{i}") for i in range(n)]


def _before(hits: list[ScoredMemory], first: ScoredMemory, second: ScoredMemory) -> bool:
    order = _order(hits)
    return order.index(first.memory.content) < order.index(second.memory.content)


def _order(hits: list[ScoredMemory]) -> list[str]:
    return [h.memory.content for h in hits]


def test_the_reply_right_after_a_matching_turn_beats_a_lone_turn_of_the_same_session() -> None:
    asked = _hit("Caroline: What are you painting these days?", 1.6, session="s1")
    lone = _hit("Melanie: The weather was lovely last week.", 1.11, session="s1")
    reply = _hit("Melanie: A sunset over the lake, with lots of orange.", 1.1, session="s1", previous=asked)
    hits = [asked, lone, reply, *_filler(20)]

    reranked = rerank("What did Melanie paint?", hits, limit=3)

    assert _order(reranked).index(reply.memory.content) < _order(reranked).index(lone.memory.content)
    assert reranked[_order(reranked).index(reply.memory.content)].components.adjacent == 1.0
    # Without the link between the two turns, the lone turn keeps its place: the neighbour made the difference.
    unlinked = dataclasses.replace(reply, previous_id=None)
    plain = rerank("What did Melanie paint?", [asked, lone, unlinked, *_filler(20)], limit=3)
    assert _order(plain).index(lone.memory.content) < _order(plain).index(reply.memory.content)


def test_a_turn_inside_the_date_the_question_names_moves_above_a_slightly_better_match() -> None:
    outside = _hit("Caroline: I ran a charity race in spring.", 1.30, session="s1")
    inside = _hit("Caroline: I ran a charity race last Saturday.", 1.25, session="s2", date=1.0)

    question = "What did Caroline do on 13 October 2023?"
    # Five better candidates first: the two compared are fifth and sixth, where one rank is a small step.
    reranked = rerank(question, [*_filler(5, top=1.5), outside, inside, *_filler(20)], limit=10)

    assert _before(reranked, inside, outside)
    undated = dataclasses.replace(inside, components=dataclasses.replace(inside.components, date=0.0))
    plain = rerank(question, [*_filler(5, top=1.5), outside, undated, *_filler(20)], limit=10)
    assert _before(plain, outside, inside)


def test_the_turn_of_the_person_the_question_names_moves_above_the_other_speakers() -> None:
    other = _hit("Melanie: I love pottery classes.", 1.30, session="s1")
    named = _hit("Pottery is relaxing for me.", 1.25, session="s2", speaker=1.0)  # said by Caroline

    question = "Does Caroline like pottery?"
    reranked = rerank(question, [*_filler(5, top=1.5), other, named, *_filler(20)], limit=10)

    assert _before(reranked, named, other)
    assert next(h for h in reranked if h.memory.id == named.memory.id).hybrid == 1.25  # kept beside the new score
    unnamed = dataclasses.replace(named, components=dataclasses.replace(named.components, speaker=0.0))
    assert _before(rerank(question, [*_filler(5, top=1.5), other, unnamed, *_filler(20)], limit=10), other, named)


def test_the_names_and_numbers_of_a_question() -> None:
    assert question_entities("When did Caroline's sister visit Paris in 2023?") == ("caroline", "paris", "2023")
    assert question_entities("¿Cuándo fue Ana a Sevilla?") == ("ana", "sevilla")
    assert question_entities("what did she say") == ()


async def test_search_reranks_and_links_each_turn_to_the_one_before(any_memory: MemoryManager, user_id: UUID) -> None:
    turns = [
        Note(content="Caroline: What are you painting these days?", session_id="s", occurred_at=_AT),
        Note(content="Melanie: A sunset over the lake.", session_id="s", occurred_at=_AT),
        Note(content="Caroline: I went to a support group.", session_id="s", occurred_at=_AT),
    ]
    await any_memory.remember_many(user_id, turns)

    hits = await any_memory.search(user_id, "What is Melanie painting?", limit=3)

    by_content = {h.memory.content: h for h in hits}
    asked, reply = by_content[turns[0].content], by_content[turns[1].content]
    assert reply.previous_id == asked.memory.id
    assert asked.previous_id is None
    assert all(h.hybrid is not None for h in hits)  # ordered by the reranker
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_a_turn_of_the_session_that_answers_best_moves_above_an_equal_lone_turn() -> None:
    best = _hit("Melanie: We went camping at the lake last weekend.", 1.6, session="trip")
    same_session = _hit("Melanie: The kids loved roasting marshmallows.", 1.0, session="trip")
    lone = _hit("Melanie: I bought new running shoes.", 1.0, session="errands")
    question = "What did Melanie do with her kids?"

    features = dict(zip(RERANK_FEATURES, rerank_features(question, [best, same_session, lone])[1], strict=True))
    assert features["session_best"] == 1.0  # the best candidate of its session is the best of all
    lone_features = dict(zip(RERANK_FEATURES, rerank_features(question, [best, same_session, lone])[2], strict=True))
    assert lone_features["session_best"] == 1.0 / 1.6  # alone in its session: its own relative score

    # Placed after the session's best, the two equal turns are told apart by the session they are in.
    hits = [*_filler(5, top=1.7), best, lone, same_session, *_filler(20, top=0.9)]
    assert _before(rerank(question, hits, limit=10), same_session, lone)
    without = {**RERANK_WEIGHTS, "session_best": 0.0, "session": 0.0, "session_rank": 0.0}  # the session inputs off
    assert _before(rerank(question, hits, limit=10, weights=without), lone, same_session)


def test_questions_that_ask_for_several_things() -> None:
    several = [
        "What books has Melanie read?",
        "How many times did Caroline go to the beach?",
        "Which cities did they visit?",
        "What kinds of pottery does Melanie make?",
        "Where did Caroline and Melanie travel?",
        "What did both of them enjoy?",
    ]
    one = [
        "What is Caroline's identity?",
        "What does Melanie do to destress?",
        "When did Caroline go to the support group?",
        "What kind of art does Caroline make?",
        "What was grandma's gift to Caroline?",
    ]
    assert [q for q in several if not asks_for_several(q)] == []
    assert [q for q in one if asks_for_several(q)] == []


def test_a_question_asking_for_several_things_reaches_beyond_the_best_session() -> None:
    # The best session holds a second turn; another session holds a slightly better one.
    best = _hit("Melanie: I read Charlotte's Web to the kids.", 1.6, session="s1")
    other_session = _hit("Melanie: I finished a novel on the train.", 1.0, session="s2")
    same_session = _hit("Melanie: The kids loved the ending.", 0.95, session="s1")
    hits = [*_filler(5, top=1.7), best, other_session, same_session, *_filler(20, top=0.9)]

    # Asked for one thing, the best session's turn goes first; asked for several, the other session's does,
    # since RERANK_WEIGHTS_SEVERAL has no `session_best`.
    assert _before(rerank("What did Melanie read to the kids?", hits, limit=10), same_session, other_session)
    assert _before(rerank("What books did Melanie read?", hits, limit=10), other_session, same_session)
    # With one set of weights for every question (several=None), the best session's turn goes first again.
    assert _before(rerank("What books did Melanie read?", hits, limit=10, several=None), same_session, other_session)
