"""The optional LLM rewrite of a search question (`search.rewrite_model`), with pydantic-ai's `FunctionModel` and
`TestModel` on every backend (`any_memory`): a phrasing's words find what the question's miss, a failing or slow
model leaves the plain search, and with the setting off no model is asked."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.retrieval import ScoreComponents, ScoredMemory
from memory_plugin.retrieval.rewrite import QUESTION_WEIGHT, RRF_K, QueryRewriter, clean_rewrites, fuse_hits
from memory_plugin.rows import MemoryRecord
from memory_plugin.store import InMemoryStore

QUESTION = "What did Ana decide about her housing?"
TARGET = "Signed a twelve-month lease on a flat in Porto"
FACTS = [
    "Ana could not decide between two colours for the kitchen",
    "Ana decided to learn Portuguese before the summer",
    "Ana asked about her sister's new job",
    TARGET,
    "Luna the dog loves running on the beach",
]
REWRITES = ["signed lease on a flat", QUESTION.lower(), "rent apartment lease Porto", "twelve-month rental contract"]


@dataclass
class Scripted:
    """A FunctionModel body: answers with `queries` (or raises, or sleeps) and records the prompts."""

    queries: list[str] = field(default_factory=lambda: list(REWRITES))
    error: Exception | None = None
    delay: float = 0.0
    prompts: list[str] = field(default_factory=list)

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.prompts.extend(
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart) and isinstance(part.content, str)
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args={"queries": self.queries})])


def rewriter(script: Scripted, **kwargs: float) -> QueryRewriter:
    return QueryRewriter(FunctionModel(script, model_name="scripted"), **kwargs)  # type: ignore[arg-type]


async def stored(memory: MemoryManager) -> UUID:
    user = uuid4()
    for fact in FACTS:
        await memory.remember(user, fact)
    return user


def ids(hits: list[ScoredMemory]) -> list[UUID]:
    return [h.memory.id for h in hits]


async def test_a_fact_only_a_phrasing_reaches_is_found(any_memory: MemoryManager) -> None:
    user = await stored(any_memory)
    plain = await any_memory.search(user, QUESTION, limit=2)
    assert TARGET not in [h.memory.content for h in plain]  # the question's words do not reach it
    script = Scripted()
    any_memory._searcher.rewriter = rewriter(script)

    hits = await any_memory.search(user, QUESTION, limit=2)

    found = {h.memory.content: h for h in hits}
    assert TARGET in found
    assert len(hits) == 2
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert found[TARGET].score == pytest.approx(3 / (RRF_K + 1))  # first in the 3 phrasings' lists (not the copy)
    assert found[TARGET].components.text > 0  # the components of the phrasing's search that found it
    assert script.prompts == [f"Question: {QUESTION}"]
    assert any_memory.stats.searches_rewritten == 1
    assert any_memory.stats.search_rewrite_failures == 0


async def test_the_same_question_asks_the_model_once(any_memory: MemoryManager) -> None:
    user = await stored(any_memory)
    script = Scripted()
    any_memory._searcher.rewriter = rewriter(script)

    first = await any_memory.search(user, QUESTION, limit=3)
    context = await any_memory.get_memory_context("s1", user, query=QUESTION)

    assert len(script.prompts) == 1  # the context's search of the same message reuses the phrasings
    assert ids(await any_memory.search(user, QUESTION, limit=3)) == ids(first)
    assert TARGET in [f.content for f in context.long_term.facts]


async def test_test_model_searches_sensibly(pg_settings: MemorySettings) -> None:
    # What users try first: pydantic-ai's TestModel answers "a", which holds nothing to search for.
    async with MemoryManager.open(pg_settings.replace(search_rewrite_model="test")) as memory:
        assert memory._searcher.rewriter is not None
        assert memory._searcher.rewriter.label == "test"
        user = await stored(memory)

        hits = await memory.search(user, "Which dog loves the beach?", limit=3)
        assert memory._searcher.rewriter.stats.calls == 1  # TestModel was asked: its answer is what was dropped
        memory._searcher.rewriter = None
        plain = await memory.search(user, "Which dog loves the beach?", limit=3)

        assert hits[0].memory.content == "Luna the dog loves running on the beach"
        assert ids(hits) == ids(plain)
        assert [h.score for h in hits] == pytest.approx([h.score for h in plain])  # recency moves with the clock
        assert memory.stats.search_rewrite_failures == 0


@pytest.mark.parametrize("failure", ["raises", "times out", "no key"])
async def test_a_failing_model_gives_the_plain_results_and_is_reported_once(
    any_memory: MemoryManager, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    user = await stored(any_memory)
    plain = await any_memory.search(user, QUESTION, limit=3)
    if failure == "no key":  # a model name whose provider has no key here: the agent cannot even be built
        any_memory._searcher.rewriter = QueryRewriter("openai:gpt-4o-mini")
    else:
        script = Scripted(error=RuntimeError("HTTP 503")) if failure == "raises" else Scripted(delay=5.0)
        any_memory._searcher.rewriter = rewriter(script, timeout=0.05)

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        hits = await any_memory.search(user, QUESTION, limit=3)
        again = await any_memory.search(user, "Who loves the beach?", limit=3)

    assert ids(hits) == ids(plain)
    assert [h.score for h in hits] == pytest.approx([h.score for h in plain])  # recency moves with the clock
    assert again[0].memory.content == "Luna the dog loves running on the beach"
    assert any_memory.stats.search_rewrite_failures == 2
    assert any_memory.stats.searches_rewritten == 0
    warnings = [r for r in caplog.records if "search rewrite model" in r.getMessage()]
    assert len(warnings) == 1  # logged once, counted every time


async def test_with_the_setting_off_no_model_is_asked(
    any_memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    async def ask(self: QueryRewriter, question: str) -> list[str]:
        calls.append(question)
        return []

    monkeypatch.setattr(QueryRewriter, "ask", ask)
    assert any_memory.settings.search.rewrite_model is None
    user = await stored(any_memory)

    await any_memory.search(user, QUESTION, limit=3)
    await any_memory.get_memory_context("s1", user, query=QUESTION)

    assert any_memory._searcher.rewriter is None
    assert calls == []
    assert any_memory.stats.searches_rewritten == any_memory.stats.search_rewrite_failures == 0


async def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_SEARCH_REWRITE_MODEL", "test")
    async with MemoryManager.open(MemorySettings(), store=InMemoryStore()) as memory:
        assert memory._searcher.rewriter is not None
        assert memory._searcher.rewriter.label == "test"


async def test_sensitive_data_in_the_question_never_reaches_the_model() -> None:
    script = Scripted()

    await rewriter(script).ask("Which card did I pay with, 4111 1111 1111 1111?")

    assert "4111" not in script.prompts[0]


def test_phrasings_are_bounded_deduplicated_and_never_the_question() -> None:
    long = "word " * 100
    queries = ["  Ana   lease ", "ana lease", QUESTION.upper(), "", "a", 7, long, "flat\nin Porto", "one more"]

    kept = clean_rewrites(QUESTION, queries, max_rewrites=3, max_chars=40)

    assert kept == ["Ana lease", ("word " * 8).strip(), "flat in Porto"]
    assert all(len(k) <= 40 for k in kept)


def hit(n: int, score: float = 1.0) -> ScoredMemory:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    memory = MemoryRecord(
        id=UUID(int=n), user_id=UUID(int=1), kind="fact", category="fact", content=f"fact {n}", confidence=1.0,
        source="explicit", importance=3, relevance_count=0, source_message_ids=(), session_id=None,
        attributes={}, content_hash=str(n), created_at=at, updated_at=at, last_reinforced_at=at,
    )  # fmt: skip
    return ScoredMemory(memory, score, ScoreComponents(text=score), hybrid=score / 2)


def test_fusion_ranks_by_weighted_reciprocal_rank_and_keeps_the_best_placed_hit() -> None:
    question = [hit(1, 9.0), hit(2, 8.0), hit(3, 7.0)]
    phrasing = [hit(4, 5.0), hit(3, 4.0), hit(5, 3.0)]

    fused = fuse_hits([question, phrasing], limit=4)

    # 3 is in both lists: first. The question's list weighs QUESTION_WEIGHT, a phrasing's 1.
    assert [h.memory.id.int for h in fused] == [3, 1, 2, 4]
    assert fused[0].score == pytest.approx(QUESTION_WEIGHT / (RRF_K + 3) + 1 / (RRF_K + 2))
    assert fused[0].components.text == 4.0  # the hit of the list that ranked it best (second in the phrasing's)
    assert fused[0].hybrid == 2.0
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    assert fuse_hits([question], limit=2) == [
        ScoredMemory(h.memory, QUESTION_WEIGHT / (RRF_K + r), h.components, h.previous_id, h.hybrid)
        for r, h in enumerate(question[:2], start=1)
    ]


def test_a_phrasing_s_best_enters_a_top_10_after_the_question_s_first_7() -> None:
    question = [hit(n, 10.0 - n) for n in range(1, 11)]
    phrasings = [[hit(21, 9.0)], [hit(22, 9.0)], [hit(23, 9.0)]]

    fused = fuse_hits([question, *phrasings], limit=10)

    # 1 / (K + 1) = QUESTION_WEIGHT / (K + 7): the tie goes to the question's list.
    assert [h.memory.id.int for h in fused] == [1, 2, 3, 4, 5, 6, 7, 21, 22, 23]
