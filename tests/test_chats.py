"""Chats: the store contract (Postgres under RLS and RAM), compaction rules, tool-pair safety, racing appends,
summaries with their embeddings, titles, and search ("volvamos al chat de los soportes anodizados")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin.chats import (
    AgentSummarizer,
    ChatService,
    ChatStore,
    CompactionPolicy,
    ExtractiveSummarizer,
    InMemoryChatStore,
    PostgresChatStore,
    title_needs_update,
)
from memory_plugin.chats.compaction import choose_cut, is_summary_turn
from memory_plugin.chats.service import from_json
from tests.chat_helpers import exchange, tool_exchange, word_embedder


@pytest_asyncio.fixture(loop_scope="session")
async def pg_pool(database_url: str) -> AsyncIterator[AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]]:
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=8, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    yield pool
    await pool.close()


@pytest_asyncio.fixture(loop_scope="session", params=["postgres", "memory"])
async def store(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[ChatStore]:
    if request.param == "memory":
        yield InMemoryChatStore()
        return
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=8, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    yield PostgresChatStore(pool)
    await pool.close()


@pytest.fixture
def service(store: ChatStore) -> ChatService:
    return ChatService(store, word_embedder())


def conversation(pairs: int, topic: str = "soportes anodizados") -> list[ModelMessage]:
    out: list[ModelMessage] = []
    for i in range(pairs):
        out += exchange(f"¿{topic} {i}?", f"{topic} {i}.")
    return out


async def test_histories_round_trip_as_pydantic_ai_messages(service: ChatService, user_id: UUID) -> None:
    turns = conversation(2) + tool_exchange("brackets", "call-1")
    chat = await service.create(user_id, turns=turns)
    history = await service.message_history(user_id, chat.id)
    assert history == turns  # usable as `message_history` as stored
    assert from_json(chat.full_history) == turns


async def test_another_user_cannot_see_change_or_delete_a_chat(service: ChatService, user_id: UUID) -> None:
    chat = await service.create(user_id, title="Mío", turns=conversation(1))
    intruder = uuid4()
    assert await service.get(intruder, chat.id) is None
    assert await service.append(intruder, chat.id, conversation(1)) is None
    assert not await service.delete(intruder, chat.id)
    assert not await service.rename(intruder, chat.id, "robado")
    assert await service.list_chats(intruder) == ([], 0)
    kept = await service.get(user_id, chat.id)
    assert kept is not None
    assert kept.turn_count == 2
    assert kept.title == "Mío"


async def test_list_pages_most_recent_first_and_delete(service: ChatService, user_id: UUID) -> None:
    ids = [(await service.create(user_id, title=f"chat {i}")).id for i in range(3)]
    await service.append(user_id, ids[0], conversation(1))  # now the most recent
    page, total = await service.list_chats(user_id, limit=2)
    assert total == 3
    assert [c.id for c in page] == [ids[0], ids[2]]
    page, _ = await service.list_chats(user_id, limit=2, offset=2)
    assert [c.id for c in page] == [ids[1]]
    assert await service.delete(user_id, ids[1])
    assert await service.get(user_id, ids[1]) is None
    assert not await service.delete(user_id, ids[1])


async def test_nothing_is_compacted_up_to_30_turns(service: ChatService, user_id: UUID) -> None:
    turns = conversation(15)
    chat = await service.create(user_id, turns=turns)
    assert chat.turn_count == 30
    assert chat.compaction_epoch == 0
    assert from_json(chat.assistant_history) == turns


async def test_beyond_30_turns_the_oldest_become_one_summary_and_full_history_is_untouched(
    service: ChatService, user_id: UUID
) -> None:
    chat = await service.create(user_id, turns=conversation(15))
    after = await service.append(user_id, chat.id, exchange("Pregunta final sobre anodizado", "Respuesta final"))
    assert after is not None
    visible = from_json(after.assistant_history)
    assert is_summary_turn(visible[0])
    tail = visible[1:]
    assert 10 <= len(tail) <= 15
    full = from_json(after.full_history)
    assert len(full) == 32
    assert full[-len(tail) :] == tail
    summary = visible[0].parts[0]
    assert isinstance(summary, CompactionPart)
    assert "anodizad" in (summary.content or "")
    # Compacting again changes nothing: the history is within the window.
    assert await service.compact(user_id, after) is None
    assert after.summary_text
    assert after.summary_embedding is not None
    assert after.summary_model == "words"


async def test_compaction_never_splits_a_tool_call_from_its_result(service: ChatService, user_id: UUID) -> None:
    # 8 tool exchanges (32 turns): every cut in the 10..15 tail range must fall between exchanges.
    turns: list[ModelMessage] = []
    for i in range(8):
        turns += tool_exchange(f"item {i}", f"call-{i}")
    chat = await service.create(user_id, turns=turns)
    visible = from_json(chat.assistant_history)
    assert is_summary_turn(visible[0])
    calls = {p.tool_call_id for m in visible for p in m.parts if isinstance(p, ToolCallPart)}
    returns = {p.tool_call_id for m in visible for p in m.parts if isinstance(p, ToolReturnPart)}
    assert calls == returns
    assert calls


def test_a_long_tool_exchange_keeps_more_turns_rather_than_splitting() -> None:
    history: list[ModelMessage] = conversation(9)  # 18 turns
    # One call whose result arrives 16 turns later: no cut in the 10..15 tail range is safe.
    history.append(ModelResponse(parts=[ToolCallPart("slow", {}, tool_call_id="late")]))
    history += [ModelResponse(parts=[TextPart(f"waiting {i}")]) for i in range(14)]
    history.append(ModelRequest(parts=[ToolReturnPart("slow", "done", tool_call_id="late")]))
    cut = choose_cut(history, CompactionPolicy())
    assert cut == 18  # just before the call: 16 turns kept
    assert choose_cut(history[:30], CompactionPolicy()) is None


def test_a_native_tool_call_answered_in_its_own_response_does_not_block_compaction() -> None:
    # A server-side (native) tool's call and return sit in one response: nothing is left open after it.
    search = ModelResponse(
        parts=[
            NativeToolCallPart("web_search", {"query": "aluminio 7075"}, tool_call_id="b1"),
            NativeToolReturnPart("web_search", "resultados", tool_call_id="b1"),
            TextPart("El 7075 es aluminio aeronáutico."),
        ]
    )
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("¿Qué es el 7075?")]), search]
    history += conversation(15)  # 32 turns in all
    cut = choose_cut(history, CompactionPolicy())
    assert cut is not None
    assert 10 <= len(history) - cut <= 15


async def test_racing_appends_lose_and_duplicate_no_turn(service: ChatService, user_id: UUID) -> None:
    chat = await service.create(user_id, turns=conversation(14))
    writers = [service.append(user_id, chat.id, exchange(f"escritor {w}", f"ok {w}")) for w in range(8)]
    await asyncio.gather(*writers)
    final = await service.get(user_id, chat.id)
    assert final is not None
    full = from_json(final.full_history)
    assert final.turn_count == len(full) == 28 + 16
    questions = [p.content for m in full for p in m.parts if getattr(p, "part_kind", "") == "user-prompt"]
    assert sorted(q for q in questions if str(q).startswith("escritor")) == sorted(f"escritor {w}" for w in range(8))
    # The model-visible history is one summary plus the tail, each writer's turns appear once after it.
    visible = from_json(final.assistant_history)
    assert sum(is_summary_turn(m) for m in visible) == 1
    assert is_summary_turn(visible[0])
    assert len(visible) <= 31
    summarised = sum(m.parts[0].metadata["replaced"] for m in visible[:1])  # type: ignore[union-attr]
    assert summarised + len(visible) - 1 >= 44 - 28  # nothing appended after the cut vanished


async def test_two_racing_compactions_apply_once(service: ChatService, user_id: UUID) -> None:
    chat = await service.store.create(user_id, None, [])
    from memory_plugin.chats.service import to_json

    row = await service.store.append(user_id, chat.id, to_json(conversation(16)))
    assert row is not None
    results = await asyncio.gather(service.compact(user_id, row), service.compact(user_id, row))
    final = await service.get(user_id, chat.id)
    assert final is not None
    assert final.compaction_epoch == 1
    assert any(r is not None for r in results)
    visible = from_json(final.assistant_history)
    assert sum(is_summary_turn(m) for m in visible) == 1
    assert len(visible) <= 16


async def test_agent_summaries_and_the_extractive_fallback(user_id: UUID) -> None:
    calls: list[str] = []

    def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("x")
        return ModelResponse(parts=[TextPart("Soportes anodizados: capa de 20 micras, entrega en marzo.")])

    service = ChatService(InMemoryChatStore(), word_embedder(), AgentSummarizer(FunctionModel(summarise)))
    chat = await service.create(user_id, turns=conversation(16))
    assert calls
    assert chat.summary_text.startswith("Soportes anodizados")

    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("provider down")

    failing = AgentSummarizer(FunctionModel(broken))
    service = ChatService(InMemoryChatStore(), word_embedder(), failing)
    chat = await service.create(user_id, turns=conversation(16))
    assert failing.fallbacks >= 1
    assert "anodizad" in chat.summary_text


async def test_summary_and_embedding_always_travel_together(service: ChatService, user_id: UUID) -> None:
    chat = await service.create(user_id, turns=conversation(1))
    assert chat.summary_text
    assert chat.summary_embedding is not None
    empty = await service.create(user_id)
    assert empty.summary_text == ""
    assert empty.summary_embedding is None


def test_title_changes_only_when_the_focus_moves() -> None:
    summary = "Soportes anodizados de aluminio: capa anodizada de 20 micras para los soportes, aluminio 6061."
    title_terms = ["soportes", "anodizados", "aluminio", "capa", "micras"]
    same_focus = summary + " Entrega de los soportes anodizados en marzo."
    new_focus = "Facturas pendientes: factura de marzo, pago de facturas por transferencia, IVA de la factura."
    assert title_needs_update(None, [], summary)
    assert not title_needs_update("Soportes anodizados", title_terms, same_focus)
    assert title_needs_update("Soportes anodizados", title_terms, new_focus)


async def test_titles_come_from_the_summary_and_user_titles_stay(service: ChatService, user_id: UUID) -> None:
    chat = await service.create(user_id, turns=conversation(3))
    assert chat.title
    assert "anodiz" in chat.title.lower()
    first = chat.title
    more = await service.append(user_id, chat.id, conversation(5))
    assert more is not None
    assert more.title == first
    moved = await service.append(user_id, chat.id, conversation(12, "facturas pendientes de pago"))
    moved = await service.append(user_id, chat.id, conversation(12, "facturas pendientes de pago")) or moved
    assert moved.title != first
    assert "factura" in (moved.title or "").lower()
    named = await service.create(user_id, title="Mi proyecto", turns=conversation(3))
    assert named.title == "Mi proyecto"


async def test_search_finds_the_chat_about_anodised_brackets(service: ChatService, user_id: UUID) -> None:
    anodised = await service.create(user_id, turns=conversation(3, "soportes anodizados"))
    await service.create(user_id, turns=conversation(3, "bridas de acero inoxidable"))
    await service.create(user_id, turns=conversation(3, "facturas pendientes de pago"))
    match = await service.find(user_id, "volvamos al chat de los soportes anodizados")
    assert match.chosen is not None
    assert match.chosen.id == anodised.id
    assert await service.find(uuid4(), "soportes anodizados") == type(match)(None)  # nobody else's


async def test_close_matches_return_a_short_list_to_confirm(service: ChatService, user_id: UUID) -> None:
    a = await service.create(user_id, turns=conversation(3, "soportes anodizados negros"))
    b = await service.create(user_id, turns=conversation(3, "soportes anodizados rojos"))
    await service.create(user_id, turns=conversation(3, "facturas pendientes de pago"))
    match = await service.find(user_id, "el chat de los soportes anodizados")
    assert match.chosen is None
    assert {h.id for h in match.candidates} == {a.id, b.id}


async def test_extractive_summary_prefers_recurring_topics() -> None:
    lines = [
        "user: Hola.",
        "user: Necesito soportes anodizados de aluminio.",
        "assistant: Los soportes anodizados llevan capa de 20 micras.",
        "user: ¿Qué tiempo hace?",
    ]
    text = await ExtractiveSummarizer().summarize(lines, 90)
    assert "soportes anodizados" in text
    assert "tiempo" not in text


async def test_the_find_chat_tool_answers_for_the_runs_user_only(service: ChatService, user_id: UUID) -> None:
    from dataclasses import dataclass

    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolReturnPart as Return

    from memory_plugin.chats.tools import chat_toolset

    @dataclass
    class Deps:
        user_id: UUID

    anodised = await service.create(user_id, turns=conversation(3, "soportes anodizados"))
    await service.create(user_id, turns=conversation(3, "facturas pendientes de pago"))
    seen: list[Any] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, Return)]
        if returns:
            seen.append(returns[-1].content)
            return ModelResponse(parts=[TextPart("ok")])
        call = ToolCallPart("find_chat", {"description": "volvamos al chat de los soportes anodizados"})
        return ModelResponse(parts=[call])

    agent = Agent(FunctionModel(model), deps_type=Deps, toolsets=[chat_toolset(service)])
    await agent.run("volvamos al chat de los soportes anodizados", deps=Deps(user_id))
    assert seen[-1]["status"] == "found"
    assert seen[-1]["chat"]["chat_id"] == str(anodised.id)
    await agent.run("volvamos al chat de los soportes anodizados", deps=Deps(uuid4()))
    assert seen[-1] == {"status": "none"}
