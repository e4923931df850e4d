"""`MemoryCapability(context=ContextBuilder)`: one budget for memory and history, as a FunctionModel receives it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import uuid4

import pytest_asyncio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import MemoryCapability, MemoryDeps, MemoryManager
from memory_plugin.context.builder import ContextBuilder
from memory_plugin.context.store import session_scope
from memory_plugin.models import MemorizedFact, MemoryUpdate, Message
from memory_plugin.settings import MemorySettings


@pytest_asyncio.fixture(loop_scope="session")
async def builder(pg_memory: MemoryManager, pg_settings: MemorySettings) -> AsyncIterator[ContextBuilder]:
    built = await ContextBuilder.open(pg_memory, pg_settings, database_url=pg_memory.database_url)
    try:
        yield built
    finally:
        await built.close()


def recording(seen: list[tuple[str | None, list[ModelMessage]]]) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((info.instructions, list(messages)))
        return ModelResponse(parts=[TextPart("Dos semanas.")])

    return FunctionModel(answer)


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]  # type: ignore[misc]


async def test_standing_preference_instructions_and_session_history_as_messages(
    pg_memory: MemoryManager, builder: ContextBuilder
) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    fact = MemorizedFact(content="Prefiere aluminio 7075", category="preference", confidence=0.9, source="explicit")
    await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact]))
    seen: list[tuple[str | None, list[ModelMessage]]] = []
    agent = Agent(recording(seen), deps_type=MemoryDeps, capabilities=[MemoryCapability(pg_memory, context=builder)])
    deps = MemoryDeps(session_id=session, user_id=user)
    await agent.run("Hola, soy de Sevilla", deps=deps)
    await agent.run("¿qué plazo tendríais para 10 piezas?", deps=deps)
    instructions, messages = seen[-1]
    assert instructions is not None
    assert "aluminio 7075" in instructions  # standing knowledge, whatever the question
    # The session's earlier exchange arrives as messages, not repeated in the instructions.
    assert prompts(messages) == ["Hola, soy de Sevilla", "¿qué plazo tendríais para 10 piezas?"]
    assert isinstance(messages[1], ModelResponse)
    assert "Sevilla" not in instructions


async def test_a_callers_history_is_used_instead_of_the_sessions(
    pg_memory: MemoryManager, builder: ContextBuilder
) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    await pg_memory.add_message(session, Message(role="user", content="mensaje guardado en la sesión"), user_id=user)
    seen: list[tuple[str | None, list[ModelMessage]]] = []
    agent = Agent(recording(seen), deps_type=MemoryDeps, capabilities=[MemoryCapability(pg_memory, context=builder)])
    given: list[ModelMessage] = []
    for i in range(80):
        given += [
            ModelRequest(parts=[UserPromptPart(f"pregunta {i} sobre bridas de aluminio")]),
            ModelResponse(parts=[TextPart(f"respuesta {i}: el plazo es de dos semanas")]),
        ]
    await agent.run("¿Y el precio?", deps=MemoryDeps(session_id=session, user_id=user), message_history=given)
    _, messages = seen[-1]
    sent = prompts(messages)
    assert sent[-1] == "¿Y el precio?"
    assert "pregunta 79 sobre bridas de aluminio" in sent
    assert "pregunta 0 sobre bridas de aluminio" not in sent
    assert "mensaje guardado en la sesión" not in sent


async def test_after_runs_the_slots_and_summary_are_kept(pg_memory: MemoryManager, builder: ContextBuilder) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    seen: list[tuple[str | None, list[ModelMessage]]] = []
    agent = Agent(recording(seen), deps_type=MemoryDeps, capabilities=[MemoryCapability(pg_memory, context=builder)])
    deps = MemoryDeps(session_id=session, user_id=user)
    await agent.run("Recuerda que prefiero aluminio 7075", deps=deps)
    await pg_memory.flush()  # the extraction ran in the background; its facts patch the slots when written
    summary = await builder.store.summary_versions(user, session_scope(session))
    assert summary  # a memory instruction is a decision: the summary was written (extractive offline)
    assert "aluminio 7075" in summary[0].content
    slots = await builder.store.read_slots(user)
    assert any("7075" in e.text for e in slots.get("preferences"))


async def test_a_slow_summary_model_never_holds_the_answer(
    pg_memory: MemoryManager, pg_settings: MemorySettings
) -> None:
    import asyncio

    from pydantic_ai.models.function import AgentInfo as Info

    release = asyncio.Event()
    started = asyncio.Event()

    async def summarize(messages: list[ModelMessage], info: Info) -> ModelResponse:
        started.set()
        await release.wait()  # a summary model that takes as long as the test wants
        return ModelResponse(parts=[TextPart("Prefiere aluminio 7075 para prototipos.")])

    slow = await ContextBuilder.open(
        pg_memory, pg_settings, database_url=pg_memory.database_url, model=FunctionModel(summarize)
    )
    try:
        user, session = uuid4(), f"s-{uuid4()}"
        seen: list[tuple[str | None, list[ModelMessage]]] = []
        agent = Agent(recording(seen), deps_type=MemoryDeps, capabilities=[MemoryCapability(pg_memory, context=slow)])
        result = await agent.run(
            "Recuerda que prefiero aluminio 7075", deps=MemoryDeps(session_id=session, user_id=user)
        )
        assert result.output == "Dos semanas."  # returned while the summary model is still working
        await asyncio.wait_for(started.wait(), timeout=30)
        assert not await slow.store.summary_versions(user, session_scope(session))
        release.set()
        assert await pg_memory.flush()
        [summary, *_] = await slow.store.summary_versions(user, session_scope(session))
        assert "7075" in summary.content
    finally:
        release.set()
        await slow.close()
