"""ContextBuilder on the real Postgres: standing knowledge every turn, slots and summary after a turn,
rehydration after a restart, and what a model receives through a capability that uses it."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
import pytest_asyncio
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, Tracer, TracerProvider
from psycopg_pool import AsyncConnectionPool
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, Instrumentation
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.tools import RunContext

from memory_plugin.context.budget import BudgetSettings, ContextReport
from memory_plugin.context.builder import ContextBuilder
from memory_plugin.context.history import messages_for_request
from memory_plugin.context.store import USER_SCOPE, PostgresContextStore, session_scope
from memory_plugin.context.tokens import token_counter
from memory_plugin.manager import MemoryManager
from memory_plugin.models import MemorizedFact, MemoryUpdate, Message
from memory_plugin.settings import MemorySettings

COUNTER = token_counter("openai:gpt-4o")


@pytest_asyncio.fixture(loop_scope="session")
async def context_store(database_url: str) -> AsyncIterator[PostgresContextStore]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, min_size=1, max_size=4, open=False)
    await pool.open(wait=True)
    try:
        yield PostgresContextStore(pool)
    finally:
        await pool.close()


def pref(content: str, category: str = "preference") -> MemorizedFact:
    return MemorizedFact(content=content, category=category, confidence=0.9, source="explicit")  # type: ignore[arg-type]


async def test_a_stated_preference_reaches_an_unrelated_question(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user = uuid4()
    await pg_memory.update_memory(
        MemoryUpdate(user_id=user, new_facts=[pref("Prefiere aluminio 7075"), pref("Trabaja en Sevilla", "contact")])
    )
    builder = ContextBuilder(pg_memory, context_store, COUNTER)
    built = await builder.build("s-plazo", user, query="¿qué plazo tendríais para 10 piezas?")
    assert "aluminio 7075" in built.instructions
    # Filled once from the facts, the slots now hold it for every later turn.
    assert [e.text for e in (await context_store.read_slots(user)).get("preferences")] == ["Prefiere aluminio 7075"]
    assert built.report.total <= 1000


async def test_after_turn_patches_slots_with_confirmed_facts_and_writes_the_summary(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user, session = uuid4(), "s-after"
    builder = ContextBuilder(pg_memory, context_store, COUNTER)
    old = (
        await pg_memory.update_memory_detailed(MemoryUpdate(user_id=user, new_facts=[pref("Prefiere latón")]))
    ).stored
    await builder.after_turn(session, user, [Message(role="user", content="Recuerda que prefiero latón")], stored=old)
    new = pref("Prefiere aluminio 7075").model_copy(update={"replaces": old[0].id})
    outcome = await pg_memory.update_memory_detailed(MemoryUpdate(user_id=user, new_facts=[new]))
    messages = [
        Message(role="user", content="Recuerda que prefiero latón"),
        Message(role="user", content="Ya no quiero latón, mejor aluminio 7075"),
    ]
    update = await builder.after_turn(session, user, messages, stored=outcome.stored, superseded=outcome.superseded)
    slots = await context_store.read_slots(user)
    assert [e.text for e in slots.get("preferences")] == ["Prefiere aluminio 7075"]
    assert update.written
    assert update.current is not None
    assert "outdated: Prefiere latón → Prefiere aluminio 7075" in update.current.content
    # The session's summary is also the user's, for the next session.
    user_summary = await builder._summarizer.current(user, "user")
    assert user_summary is not None
    assert user_summary.content == update.current.content


async def test_rehydration_after_a_restart(
    pg_settings: MemorySettings, context_store: PostgresContextStore, database_url: str
) -> None:
    user, session = uuid4(), "s-restart"
    async with MemoryManager.open(pg_settings) as first:
        builder = ContextBuilder(first, context_store, COUNTER)
        stored = (
            await first.update_memory_detailed(
                MemoryUpdate(user_id=user, new_facts=[pref("No sugerir acero inoxidable", "rejection")])
            )
        ).stored
        said = ["Vamos con 50 bridas de aluminio 7075", "No me sugieras acero inoxidable"]
        for text in said:
            await first.add_message(session, Message(role="user", content=text), user_id=user)
        short = await first.get_short_term(session, user_id=user)
        await builder.after_turn(session, user, short.messages, stored=stored)
    # A new process: sessions in RAM are gone; slots, summary and facts are in Postgres.
    async with MemoryManager.open(pg_settings) as second:
        assert (await second.get_short_term(session, user_id=user)).messages == []
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
        await pool.open(wait=True)
        try:
            builder = ContextBuilder(second, PostgresContextStore(pool), COUNTER)
            caller_history = [m for i in range(40) for m in turn(i)]
            built = await builder.build(session, user, query="¿Y el plazo?", history=caller_history)
        finally:
            await pool.close()
    assert "50 bridas" in built.instructions  # the summary
    assert "acero inoxidable" in built.instructions  # the slots
    assert 4 <= len(built.history) < len(caller_history)
    assert built.report.total <= 1000


def turn(i: int) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(f"pregunta número {i} sobre el pedido de bridas")]),
        ModelResponse(parts=[TextPart(f"respuesta número {i}: el plazo es de dos semanas")]),
    ]


@dataclass
class BudgetedMemory(AbstractCapability[Any]):
    """How a capability wires the builder: memory in the instructions, the clamped history as messages,
    compaction of a long run with the rolling summary as a `CompactionPart`."""

    builder: ContextBuilder
    session_id: str
    user_id: UUID
    _instructions: str = field(default="", init=False)
    _history: list[ModelMessage] = field(default_factory=list, init=False)
    _summary: str | None = field(default=None, init=False)
    _given: list[ModelMessage] = field(default_factory=list, init=False)
    _report: ContextReport | None = field(default=None, init=False)

    async def for_run(self, ctx: RunContext[Any]) -> BudgetedMemory:
        run = BudgetedMemory(self.builder, self.session_id, self.user_id)
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else None
        run._given = list(ctx.messages)  # the caller's message_history (the prompt comes later)
        built = await self.builder.build(self.session_id, self.user_id, query=prompt, history=run._given or None)
        run._instructions, run._history, run._report = built.instructions, built.history, built.report
        run._summary = built.summary
        return run

    def get_instructions(self) -> str | None:
        return self._instructions or None

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        # Instrumentation is the outermost capability: here the current span is the agent run's.
        if self._report is not None:
            trace.get_current_span().set_attributes(self._report.as_attributes())
        return await handler()

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        request_context.messages = messages_for_request(
            request_context.messages,
            first_request=ctx.run_step == 1,
            history=self._history,
            given=len(self._given),
            summary=self._summary,
            counter=self.builder.counter,
            max_tokens=self.builder.budget.total_tokens,
        )
        return request_context


async def test_the_model_receives_memory_as_instructions_and_history_as_messages(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user, session = uuid4(), "s-agent"
    await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[pref("Prefiere aluminio 7075")]))
    for i in range(30):
        await pg_memory.add_message(
            session, Message(role="user", content=f"pregunta número {i} sobre bridas"), user_id=user
        )
        await pg_memory.add_message(session, Message(role="assistant", content=f"respuesta número {i}"), user_id=user)
    await context_store.add_summary(
        user, session_scope(session), "Pidió 50 bridas.", kind="model", language="es", message_count=60
    )
    seen: list[tuple[str | None, list[ModelMessage]]] = []
    calls = 0

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        seen.append((info.instructions, list(messages)))
        if calls < 12:  # a long run of tool calls, so compaction has to step in
            return ModelResponse(parts=[ToolCallPart("stock", {"ref": "x" * 300}, tool_call_id=f"c{calls}")])
        return ModelResponse(parts=[TextPart("Plazo: dos semanas")])

    agent: Agent[None, str] = Agent(FunctionModel(answer))

    @agent.tool_plain
    def stock(ref: str) -> str:
        return "120 unidades en almacén " * 20

    builder = ContextBuilder(pg_memory, context_store, COUNTER, BudgetSettings(total_tokens=1000))
    result = await agent.run(
        "¿qué plazo tendríais para 10 piezas?", capabilities=[BudgetedMemory(builder, session, user)]
    )
    assert result.output == "Plazo: dos semanas"
    instructions, first = seen[0]
    assert instructions is not None
    assert "aluminio 7075" in instructions
    assert "Pidió 50 bridas" in instructions
    # The history arrives as messages (the session keeps its last 20), not repeated in the instructions.
    texts = [p.content for m in first for p in m.parts if isinstance(p, UserPromptPart)]
    assert texts[-1] == "¿qué plazo tendríais para 10 piezas?"
    assert texts[:-1] == [f"pregunta número {i} sobre bridas" for i in range(20, 30)]
    assert "pregunta número" not in instructions
    # Later in the run, compaction: the summary as a CompactionPart, tool pairs whole, within the budget.
    _, last = seen[-1]
    compactions = [p for m in last for p in m.parts if isinstance(p, CompactionPart)]
    assert [p.content for p in compactions] == ["Pidió 50 bridas."]
    calls_ids = {p.tool_call_id for m in last for p in m.parts if isinstance(p, ToolCallPart)}
    returns_ids = {p.tool_call_id for m in last for p in m.parts if isinstance(p, ToolReturnPart)}
    assert calls_ids == returns_ids


async def test_after_an_extraction_that_does_not_say_what_it_superseded(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user, session = uuid4(), "s-extraction"
    builder = ContextBuilder(pg_memory, context_store, COUNTER)
    old = (
        await pg_memory.update_memory_detailed(MemoryUpdate(user_id=user, new_facts=[pref("Prefiere latón")]))
    ).stored
    await builder.after_turn(session, user, [Message(role="user", content="Prefiero latón")], stored=old)
    new = pref("Prefiere aluminio 7075").model_copy(update={"replaces": old[0].id})
    stored = await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[new]))
    # What `ExtractionRun.stored` gives: the stored facts, not the superseded ones (and a fact may supersede
    # another without naming it in `replaces`: the store's rules can).
    stored = [f.model_copy(update={"replaces": None}) for f in stored]
    await builder.after_turn(
        session,
        user,
        [Message(role="user", content="Ya no quiero latón, mejor aluminio 7075")],
        stored=stored,
        superseded=None,
    )
    assert [e.text for e in (await context_store.read_slots(user)).get("preferences")] == ["Prefiere aluminio 7075"]


async def test_a_callers_message_history_is_clamped_not_doubled(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user, session = uuid4(), "s-given"
    await pg_memory.add_message(session, Message(role="user", content="mensaje de la sesión en RAM"), user_id=user)
    seen: list[list[ModelMessage]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart("Dos semanas")])

    agent: Agent[None, str] = Agent(FunctionModel(answer))
    builder = ContextBuilder(pg_memory, context_store, COUNTER, BudgetSettings(total_tokens=600))
    given = [m for i in range(60) for m in turn(i)]
    await agent.run("¿Y el plazo?", message_history=given, capabilities=[BudgetedMemory(builder, session, user)])
    [sent] = seen
    texts = [p.content for m in sent for p in m.parts if isinstance(p, UserPromptPart)]
    assert texts[-1] == "¿Y el plazo?"
    assert "pregunta número 59 sobre el pedido de bridas" in texts
    assert "pregunta número 0 sobre el pedido de bridas" not in texts
    assert "mensaje de la sesión en RAM" not in texts  # the caller's history replaces the session's
    assert len(texts) == len(set(texts))
    # The history ends with the caller's last message, whole, just before the new prompt.
    assert sent[-2] == given[-1]


class RecordingSpan(NonRecordingSpan):
    """A span that keeps its attributes (the OpenTelemetry SDK is not installed)."""

    def __init__(self, name: str, attributes: Any) -> None:
        ids = random.Random(name)
        super().__init__(SpanContext(ids.getrandbits(128), ids.getrandbits(64), False, TraceFlags(1)))
        self.name = name
        self.attributes: dict[str, Any] = dict(attributes or {})

    def is_recording(self) -> bool:
        return True

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Any) -> None:
        self.attributes.update(attributes)


class RecordingTracer(Tracer):
    def __init__(self) -> None:
        self.spans: list[RecordingSpan] = []

    def start_span(
        self, name: str, context: Any = None, kind: Any = None, attributes: Any = None, *a: Any, **k: Any
    ) -> RecordingSpan:
        span = RecordingSpan(name, attributes)
        self.spans.append(span)
        return span

    @contextmanager  # type: ignore[override]
    def start_as_current_span(
        self, name: str, *a: Any, attributes: Any = None, end_on_exit: bool = True, **k: Any
    ) -> Iterator[RecordingSpan]:
        span = self.start_span(name, attributes=attributes)
        with trace.use_span(span, end_on_exit=end_on_exit):
            yield span


class RecordingProvider(TracerProvider):
    def __init__(self) -> None:
        self.tracer = RecordingTracer()

    def get_tracer(self, *a: Any, **k: Any) -> RecordingTracer:
        return self.tracer


async def test_the_report_is_an_attribute_of_the_agent_run_span(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user, session = uuid4(), "s-span"
    await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[pref("Prefiere aluminio 7075")]))
    provider = RecordingProvider()
    agent: Agent[None, str] = Agent(
        FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("Dos semanas")])),
        capabilities=[Instrumentation(InstrumentationSettings(tracer_provider=provider))],
    )
    builder = ContextBuilder(pg_memory, context_store, COUNTER)
    await agent.run("¿Plazo para 10 piezas?", capabilities=[BudgetedMemory(builder, session, user)])
    [run_span] = [s for s in provider.tracer.spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert run_span.attributes["memory.context.budget"] == 1000
    assert 0 < run_span.attributes["memory.context.slots"] <= 250
    assert run_span.attributes["memory.context.total"] <= 1000


async def test_open_uses_the_managers_database_and_closes(
    pg_memory: MemoryManager, pg_settings: MemorySettings
) -> None:
    builder = await ContextBuilder.open(pg_memory, pg_settings, database_url=pg_memory.database_url)
    try:
        assert isinstance(builder.store, PostgresContextStore)
        user = uuid4()
        await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[pref("Prefiere aluminio 7075")]))
        built = await builder.build("s-open", user, query="¿plazo?")
        assert "aluminio 7075" in built.instructions
        assert builder.counter.name == "~o200k_base"  # no agent or token model set: approximated
    finally:
        await builder.close()


async def test_a_forgotten_fact_leaves_the_slots(pg_memory: MemoryManager, context_store: PostgresContextStore) -> None:
    user = uuid4()
    [stored] = await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[pref("Prefiere latón")]))
    builder = ContextBuilder(pg_memory, context_store, COUNTER)
    assert "latón" in (await builder.build("s-forget", user)).instructions
    assert await pg_memory.forget(user, stored.id)
    await builder.forget(user, [stored.id])
    assert "latón" not in (await builder.build("s-forget", user)).instructions


async def test_a_bad_user_id_is_the_managers_typed_error(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    from memory_plugin.errors import InvalidMemoryInputError

    builder = ContextBuilder(pg_memory, context_store, COUNTER)
    with pytest.raises(InvalidMemoryInputError):
        await builder.build("s-bad", "not-a-uuid")
    anonymous = await builder.build("s-anon", None, query="hola")
    assert anonymous.report.slots == 0


async def test_a_session_summary_is_left_out_while_the_history_still_holds_what_it_covers(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    builder = ContextBuilder(pg_memory, context_store, COUNTER, BudgetSettings(total_tokens=700))
    said: list[Message] = []
    for i in range(3):
        for message in (
            Message(role="user", content=f"Vamos con el pedido número {i} de bridas"),
            Message(role="assistant", content=f"Anotado el pedido número {i}. " + "Plazo de dos semanas. " * 12),
        ):
            await pg_memory.add_message(session, message, user_id=user)
            said.append(message)
        await builder.after_turn(session, user, said)
    assert await builder._summarizer.current(user, session_scope(session)) is not None
    short = await builder.build(session, user)
    assert "Summary of the conversation" not in short.instructions  # the messages say it all
    assert short.report.messages_dropped == 0
    assert short.summary  # still there for compaction later in the run
    for i in range(3, 12):
        for message in (
            Message(role="user", content=f"Vamos con el pedido número {i} de bridas"),
            Message(role="assistant", content=f"Anotado el pedido número {i}. " + "Plazo de dos semanas. " * 12),
        ):
            await pg_memory.add_message(session, message, user_id=user)
            said.append(message)
        await builder.after_turn(session, user, said[-20:])
    long = await builder.build(session, user)
    assert long.report.messages_dropped > 0
    assert "Summary of the conversation" in long.instructions  # it stands for the dropped messages


async def test_a_new_session_builds_on_the_users_summary_and_a_due_resync_rebuilds_it_from_facts(
    pg_memory: MemoryManager, context_store: PostgresContextStore
) -> None:
    user = uuid4()
    builder = ContextBuilder(pg_memory, context_store, COUNTER)
    stored = await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[pref("Prefiere aluminio 7075")]))
    first = await builder.after_turn(
        "s-first", user, [Message(role="user", content="Recuerda que prefiero aluminio 7075")], stored=stored
    )
    assert first.written
    assert first.current is not None
    # A new session's first summary starts from what the first one handed over.
    second = await builder.after_turn(
        "s-second", user, [Message(role="user", content="Recuerda que necesito 50 bridas para marzo")]
    )
    assert second.written
    assert second.current is not None
    assert "aluminio 7075" in second.current.content
    assert "50 bridas" in second.current.content
    # Once the user's summary is due for its rebuild, a turn rewrites it from the current facts only.
    builder._summarizer.policy = dataclasses.replace(builder._summarizer.policy, resync_after=timedelta(0))
    await builder.after_turn("s-second", user, [])
    rebuilt = await builder._summarizer.current(user, USER_SCOPE)
    assert rebuilt is not None
    assert rebuilt.kind == "resync"
    assert "aluminio 7075" in rebuilt.content
    assert "50 bridas" not in rebuilt.content
