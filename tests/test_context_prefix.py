"""The request's prefix holds while nothing durable changed: the rolling summary leads the history and is
replaced only when the history restarts, so a summary rewrite costs no prompt-cache miss on its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from uuid import UUID, uuid4

import pytest
import pytest_asyncio
from psycopg_pool import AsyncConnectionPool

from memory_plugin import InMemoryStore, MemoryManager, MemorySettings
from memory_plugin.context.budget import AssembledContext, BudgetSettings
from memory_plugin.context.builder import ContextBuilder
from memory_plugin.context.history import messages_from_session
from memory_plugin.context.slots import SlotEntry, SlotPatch, Slots
from memory_plugin.context.store import (
    USER_SCOPE,
    ContextStore,
    InMemoryContextStore,
    PostgresContextStore,
    session_scope,
)
from memory_plugin.context.tokens import token_counter
from memory_plugin.models import Message

COUNTER = token_counter("openai:gpt-4o")
START = datetime(2026, 11, 1, 9, tzinfo=UTC)


def session(n: int) -> list[Message]:
    said: list[Message] = []
    for i in range(n):
        at = START + timedelta(minutes=2 * i)
        said.append(Message(role="user", content=f"pregunta {i}: " + "piezas de aluminio " * 10, timestamp=at))
        said.append(
            Message(
                role="assistant", content=f"respuesta {i}: " + "plazo de entrega " * 10, timestamp=at + timedelta(0, 30)
            )
        )
    return said


async def summarise(store: ContextStore, user: UUID, session_id: str, text: str) -> None:
    await store.add_summary(user, session_scope(session_id), text, kind="model", language="es", message_count=0)


async def test_a_rewritten_summary_waits_for_the_history_to_restart() -> None:
    said = session(40)
    async with MemoryManager.open(MemorySettings(embedding_model="none"), store=InMemoryStore()) as memory:
        store = InMemoryContextStore()
        builder = ContextBuilder(memory, store, COUNTER, BudgetSettings(total_tokens=700))
        user = uuid4()
        session_id = f"{user}/taller"

        async def build(exchanges: int) -> AssembledContext:
            history = messages_from_session(said[: 2 * exchanges])
            return await builder.build(session_id, user, history=history, keep_prefix=True)

        await summarise(store, user, session_id, "Pidió 40 bridas.")
        first = await build(10)
        assert "40 bridas" in first.summary_block
        assert "40 bridas" not in first.standing  # the summary is not in the instructions
        # A full history: the next exchange restarts it, and the newest summary comes with the restart.
        await summarise(store, user, session_id, "Pidió 60 bridas.")
        restarted = await build(11)
        assert not restarted.anchored
        assert "60 bridas" in restarted.summary_block
        # A rewrite while the history keeps its start: the same summary, the request grows at its end only.
        await summarise(store, user, session_id, "Pidió 80 bridas.")
        grown = await build(12)
        assert grown.anchored
        assert grown.summary_block == restarted.summary_block
        assert grown.standing == restarted.standing
        assert grown.history[: len(restarted.history)] == restarted.history
        assert grown.summary == "Pidió 80 bridas."  # what compaction later in the run would hand over
        # When it no longer fits, the history restarts with the newest summary.
        later = [await build(n) for n in range(13, 20)]
        first_restart = next(b for b in later if not b.anchored)
        assert "80 bridas" in first_restart.summary_block
        assert all("60 bridas" in b.summary_block for b in later[: later.index(first_restart)])


@pytest_asyncio.fixture(loop_scope="session", params=["memory", "postgres", "postgres-autocommit"])
async def context_store(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[ContextStore]:
    if request.param == "memory":
        yield InMemoryContextStore()
        return
    autocommit = request.param == "postgres-autocommit"  # as the manager's one pool
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        database_url, min_size=1, max_size=2, open=False, kwargs={"autocommit": autocommit}
    )
    await pool.open(wait=True)
    try:
        yield PostgresContextStore(pool)
    finally:
        await pool.close()


async def test_a_turn_reads_slots_and_the_current_summaries_together(context_store: ContextStore) -> None:
    user, other = uuid4(), uuid4()
    scope = session_scope("taller")
    assert await context_store.read_turn(user, (scope, USER_SCOPE)) == (Slots(), {})
    patch = SlotPatch(expected={"goal": []}, new={"goal": [SlotEntry(text="Reducir el plazo a una semana")]})
    assert await context_store.patch_slots(user, patch)
    for text in ("Pidió 40 bridas.", "Pidió 60 bridas."):
        await summarise(context_store, user, "taller", text)
    await context_store.add_summary(user, USER_SCOPE, "Taller de drones.", kind="model", language="es", message_count=0)
    await summarise(context_store, other, "taller", "Otro usuario.")

    slots, current = await context_store.read_turn(user, (scope, USER_SCOPE))
    assert [e.text for e in slots.get("goal")] == ["Reducir el plazo a una semana"]
    assert current[scope].content == "Pidió 60 bridas."  # the newest version only
    assert current[USER_SCOPE].content == "Taller de drones."
    # Another session of the same user has no summary of its own yet; another user's never shows.
    _, fresh = await context_store.read_turn(user, (session_scope("otra"), USER_SCOPE))
    assert set(fresh) == {USER_SCOPE}


async def test_the_history_keeps_its_start_past_the_session_window_until_the_budget_restarts_it() -> None:
    # The session keeps its last 6 messages; the budget holds ~11 exchanges of ~60 tokens each.
    settings = MemorySettings(embedding_model="none", max_messages_per_session=6)
    async with MemoryManager.open(settings, store=InMemoryStore()) as memory:
        builder = ContextBuilder(memory, InMemoryContextStore(), COUNTER, BudgetSettings(total_tokens=700))
        user = uuid4()
        session_id = f"{user}/taller"
        built: list[AssembledContext] = []
        for i in range(16):
            built.append(await builder.build(session_id, user, query=f"pregunta {i}", keep_prefix=True))
            prompt = f"pregunta {i}: " + "piezas de aluminio " * 10
            await memory.record_exchange(session_id, user, prompt, f"respuesta {i}: " + "plazo de entrega " * 10)

        def first_text(assembled: AssembledContext) -> str:
            return str(getattr(assembled.history[0].parts[0], "content", "")).split(":")[0] if assembled.history else ""

        # Well past the window's 3 exchanges, the request still starts at the first message and only grows.
        grown = [b for b in built[2:] if b.anchored]
        assert len(grown) >= 6
        assert all(first_text(b) == "pregunta 0" for b in grown[:6])
        for before, after in pairwise(built[1:8]):
            assert after.history[: len(before.history)] == before.history
        # The budget, not the window, restarts it: the restarted history is a suffix within the budget.
        restart = next(b for b in built[2:] if not b.anchored)
        assert len(built[built.index(restart) - 1].history) > 6
        assert restart.report.total <= 700
        assert first_text(restart) != "pregunta 0"


async def test_the_standing_memory_follows_the_agents_own_instructions_as_a_dynamic_part() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import InstructionPart, ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from memory_plugin import MemoryCapability, MemoryDeps, MemoryUpdate, UserPreferences

    seen: list[list[InstructionPart]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(info.model_request_parameters.instruction_parts or []))
        return ModelResponse(parts=[TextPart("Anotado.")])

    async with MemoryManager.open(MemorySettings(embedding_model="none"), store=InMemoryStore()) as memory:
        user = uuid4()
        preferences = UserPreferences(preferred_materials=["aluminio 7075"])
        await memory.update_memory(MemoryUpdate(user_id=user, preferences=preferences))
        agent = Agent(
            FunctionModel(model),
            deps_type=MemoryDeps,
            instructions="Eres el asistente de presupuestos.",
            capabilities=[MemoryCapability(memory)],
        )
        await agent.run("¿Plazo para 10 brazos?", deps=MemoryDeps(session_id=f"{user}/taller", user_id=user))

    agent_part, memory_part = seen[-1]
    # The agent's literal instructions first: the prefix every conversation shares ends before the user's memory.
    assert agent_part.content == "Eres el asistente de presupuestos."
    assert not agent_part.dynamic
    assert "aluminio 7075" in memory_part.content
    assert memory_part.dynamic


async def test_a_session_summary_and_the_users_copy_are_stored_in_one_round_trip(
    context_store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, scope = uuid4(), session_scope("taller")
    calls: list[int] = []
    if isinstance(context_store, PostgresContextStore):
        run_all = PostgresContextStore._run_all

        async def counted(self: PostgresContextStore, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return await run_all(self, *args, **kwargs)

        monkeypatch.setattr(PostgresContextStore, "_run_all", counted)
    written = await context_store.add_summary(
        user,
        scope,
        "Pidió 40 bridas.",
        kind="model",
        language="es",
        message_count=4,
        covered_from=START,
        copy_to=USER_SCOPE,
    )
    assert len(calls) == (1 if isinstance(context_store, PostgresContextStore) else 0)
    assert written.scope == scope
    assert written.covered_from == START
    _, current = await context_store.read_turn(user, (scope, USER_SCOPE))
    assert current[USER_SCOPE].content == "Pidió 40 bridas."
    assert current[USER_SCOPE].covered_from is None  # the user's copy reaches back to earlier sessions
    assert current[scope].version == current[USER_SCOPE].version == 1
