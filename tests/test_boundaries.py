"""What reaches the plugin from outside: bad input gets one typed error before anything is paid for or written,
a closed manager says so, limits hold, and an answer the model produced is never thrown away."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID, uuid4

import pytest
from pydantic import ValidationError
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from memory_plugin import (
    InMemoryStore,
    InvalidMemoryInputError,
    MemorizedFact,
    MemoryCapability,
    MemoryContext,
    MemoryDeps,
    MemoryManager,
    MemoryPluginError,
    MemorySettings,
    MemoryUpdate,
    Message,
    Note,
    SessionOwnershipError,
    ShortTermMemory,
    format_memory_for_agent,
)
from memory_plugin.errors import ManagerClosedError, MemoryLimitError
from memory_plugin.write.rate_limit import WriteRateLimit


class CountingModel:
    """A FunctionModel body that answers `answer` and counts its calls."""

    def __init__(self, answer: str = "De acuerdo.") -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return ModelResponse(parts=[TextPart(self.answer)])


def agent_with(memory: MemoryManager, model: CountingModel, **options: bool) -> Agent[MemoryDeps, str]:
    return Agent(FunctionModel(model), deps_type=MemoryDeps, capabilities=[MemoryCapability(memory, **options)])


@pytest.mark.parametrize("prompt", ["d" * 2_000_000, "hola \x00 mundo", "hola \ud800 mundo"])
async def test_a_turn_memory_would_refuse_costs_no_model_call(
    pg_memory: MemoryManager, user_id: UUID, prompt: str
) -> None:
    model = CountingModel()
    with pytest.raises(InvalidMemoryInputError):
        await agent_with(pg_memory, model).run(prompt, deps=MemoryDeps(session_id=f"s-{uuid4()}", user_id=user_id))
    assert model.calls == 0


@pytest.mark.slow
async def test_an_answer_memory_cannot_record_is_still_returned(pg_memory: MemoryManager, user_id: UUID) -> None:
    model = CountingModel(answer="Aquí está \x00 tu presupuesto")  # Postgres cannot store this answer
    before = pg_memory.stats.exchanges_not_recorded
    result = await agent_with(pg_memory, model).run(
        "Necesito 10 piezas", deps=MemoryDeps(session_id=f"s-{uuid4()}", user_id=user_id)
    )
    assert result.output == "Aquí está \x00 tu presupuesto"
    assert pg_memory.stats.exchanges_not_recorded == before + 1


async def test_test_model_with_the_memory_tools_runs_and_stores_no_placeholder(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    agent = Agent(TestModel(), deps_type=MemoryDeps, capabilities=[MemoryCapability(pg_memory, tools=True)])
    result = await agent.run("Hola", deps=MemoryDeps(session_id=f"s-{uuid4()}", user_id=user_id))
    assert isinstance(result.output, str)
    assert [r.content for r in await pg_memory.list_memory(user_id)] == []


async def test_the_remember_tool_stores_a_real_sentence_and_refuses_a_placeholder(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    placeholder = TestModel(call_tools=["remember"], custom_output_text="ok")
    agent = Agent(placeholder, deps_type=MemoryDeps, capabilities=[MemoryCapability(pg_memory, tools=True)])
    await agent.run("Hola", deps=MemoryDeps(session_id=f"s-{uuid4()}", user_id=user_id))
    assert await pg_memory.list_memory(user_id) == []  # TestModel's "a" is not a fact

    answers: list[str] = []

    def remembering(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returned:
            answers.append(str(returned[-1].content))
            return ModelResponse(parts=[TextPart("Anotado.")])
        args = {"fact": "Prefiere latón para los casquillos", "category": "preference"}
        return ModelResponse(parts=[ToolCallPart("remember", args)])

    agent = Agent(
        FunctionModel(remembering),
        deps_type=MemoryDeps,
        capabilities=[MemoryCapability(pg_memory, tools=True, extract_facts=False)],  # only the tool writes
    )
    await agent.run("Recuérdalo", deps=MemoryDeps(session_id=f"s-{uuid4()}", user_id=user_id))
    assert answers[0].startswith("Remembered")
    assert [r.content for r in await pg_memory.list_memory(user_id)] == ["Prefiere latón para los casquillos"]


async def test_a_closed_manager_raises_on_every_call(database_url: str, user_id: UUID) -> None:
    settings = MemorySettings(database_url=database_url)
    async with MemoryManager.open(settings) as memory:
        pass
    assert memory.closed
    fact = MemorizedFact(content="Prefiere latón", category="preference", confidence=0.9, source="explicit")
    calls = [
        memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact])),
        memory.remember(user_id, "Prefiere latón"),
        memory.search(user_id, "latón"),
        memory.get_memory_context("s", user_id),
        memory.add_message("s", Message(role="user", content="hola")),
        memory.list_memory(user_id),
        memory.forget(user_id, uuid4()),
        memory.extract_if_due("s", user_id),
    ]
    for call in calls:
        with pytest.raises(ManagerClosedError):
            await call


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Message(role="user", content=""), "content"),
        (lambda: MemorizedFact(content="x y", category="hobby", confidence=0.9, source="explicit"), "category"),
        (lambda: MemorizedFact(content="x y", category="fact", confidence=1.5, source="explicit"), "confidence"),
        (lambda: MemoryUpdate(user_id="bob"), "user_id"),
        (lambda: Note(content="hola", metadata={"k": "a\x00b"}), "metadata"),
        (lambda: Note(content="hola \ud800"), "content"),
    ],
)
def test_building_a_public_model_from_bad_values_raises_the_plugins_error(build: object, field: str) -> None:
    with pytest.raises(InvalidMemoryInputError, match=field) as info:
        build()  # type: ignore[operator]
    assert isinstance(info.value, MemoryPluginError)
    assert isinstance(info.value, ValidationError)  # and still pydantic's, for code that catches that


async def test_unstorable_text_never_reaches_the_database(pg_memory: MemoryManager, user_id: UUID) -> None:
    with pytest.raises(InvalidMemoryInputError, match="metadata"):
        await pg_memory.remember(user_id, "Prefiere latón", metadata={"k": "a\x00b"})
    with pytest.raises(InvalidMemoryInputError, match="metadata"):
        await pg_memory.remember(user_id, "Prefiere latón", metadata={"speaker": "\udc80"})
    with pytest.raises(InvalidMemoryInputError):
        await pg_memory.remember(user_id, "Prefiere \ud800 latón")
    with pytest.raises(InvalidMemoryInputError):
        await pg_memory.search(user_id, "latón \ud800")
    with pytest.raises(InvalidMemoryInputError):
        await pg_memory.search_text(user_id, "\ud800")
    # A query-aware context whose query cannot be searched is still a context (ranked without the query).
    context = await pg_memory.get_memory_context("s-1", user_id, query="\ud800")
    assert context.user_id == user_id
    assert await pg_memory.list_memory(user_id) == []


async def test_dates_outside_what_can_be_read_back_are_refused_and_history_stays_readable(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    await pg_memory.remember(user_id, "Compró una fresadora", occurred_at=datetime(2026, 3, 1, tzinfo=UTC))
    far_east = timezone(timedelta(hours=14))
    for when in (
        datetime(1, 1, 1, 0, 30, tzinfo=far_east),
        datetime(9999, 12, 31, 23, 0, tzinfo=timezone(-timedelta(hours=5))),
    ):
        with pytest.raises(InvalidMemoryInputError, match="range"):
            await pg_memory.remember(user_id, "Una fecha extrema", occurred_at=when)
        with pytest.raises(InvalidMemoryInputError, match="range"):
            MemorizedFact(content="x y", category="fact", confidence=0.9, source="explicit", timestamp=when)
    assert [r.content for r in await pg_memory.list_memory(user_id)] == ["Compró una fresadora"]
    assert len(await pg_memory.fact_history(user_id)) == 1


async def test_describe_never_shows_the_database_password() -> None:
    memory = MemoryManager(
        MemorySettings(embedding_model="none"),
        InMemoryStore(),
        database_url="postgresql://memory_plugin_app:S3cret-pass@db.example:5432/postgres",
    )
    described = await memory.describe()
    assert "S3cret" not in str(described)
    assert described["database_url"] == "postgresql://memory_plugin_app:***@db.example:5432/postgres"
    assert described["live_sessions"] == 0  # the RAM sessions, counted inline


async def test_one_user_writing_too_fast_is_refused_whole_and_others_are_not(user_id: UUID) -> None:
    settings = MemorySettings(embedding_model="none", write_burst=5, write_rate_per_second=0.001)
    async with MemoryManager.open(settings, store=InMemoryStore()) as memory:
        notes = [Note(content=f"Nota número {i}") for i in range(6)]
        with pytest.raises(MemoryLimitError) as info:
            await memory.remember_many(user_id, notes)
        assert info.value.retry_after is None  # more than the burst: waiting does not help
        assert await memory.list_memory(user_id) == []
        assert len(await memory.remember_many(user_id, notes[:5])) == 5
        with pytest.raises(MemoryLimitError) as info:
            await memory.remember(user_id, "Una más")
        assert info.value.retry_after is not None
        assert info.value.retry_after > 0
        assert len(await memory.remember_many(uuid4(), notes[:5])) == 5  # another user has their own bucket


def test_the_rate_limit_refills_with_time() -> None:
    now = [0.0]
    limit = WriteRateLimit(per_second=10, burst=20, clock=lambda: now[0])
    user = uuid4()
    limit.take(user, 20)
    with pytest.raises(MemoryLimitError) as info:
        limit.take(user, 5)
    assert info.value.retry_after == pytest.approx(0.5)
    now[0] = 0.5
    limit.take(user, 5)
    WriteRateLimit(per_second=0, burst=1).take(user, 1_000_000)  # 0: off


def test_metadata_has_a_size_limit() -> None:
    with pytest.raises(InvalidMemoryInputError, match="metadata"):
        Note(content="hola", metadata={"blob": "x" * 100_000})


def test_the_memory_block_stays_bounded_whatever_the_session_holds() -> None:
    entities = {f"kind{k}": [f"valor {k}-{i}" for i in range(2_000)] for k in range(100)}
    context = MemoryContext(session_id="s", short_term=ShortTermMemory(entities=entities))
    block = format_memory_for_agent(context)
    assert len(block) < 12_500
    assert block.startswith('<memory id="')
    assert block.endswith('">')  # the fence is closed after the cut
    assert "limited in size" in block


async def test_a_session_of_one_user_is_never_read_or_extracted_for_another(pg_memory: MemoryManager) -> None:
    alice, bob = uuid4(), uuid4()
    session = f"b-session-{uuid4()}"
    said = Message(role="user", content="Recuerda que mi presupuesto máximo es 3000 euros")
    await pg_memory.add_message(session, said, user_id=bob)
    # Alice's calls with Bob's session id act on Alice's own session of that id: none sees or changes Bob's.
    assert (await pg_memory.get_memory_context(session, alice)).short_term.messages == []
    assert await pg_memory.remember_from_session(session, alice) == []
    await pg_memory.extract_if_due(session, alice)
    await pg_memory.add_message(session, Message(role="user", content="soy Alice"), user_id=alice)
    await pg_memory.update_session_entities(session, {"materials": ["oro"]}, user_id=alice)
    await pg_memory.update_session_intents(session, "budget_request", user_id=alice)
    assert [m.content for m in (await pg_memory.get_short_term(session, user_id=alice)).messages] == ["soy Alice"]
    with pytest.raises(SessionOwnershipError):  # and without a user, no one reads a user's session
        await pg_memory.get_short_term(session)
    assert await pg_memory.list_memory(alice) == []
    bobs = await pg_memory.get_short_term(session, user_id=bob)
    assert ([m.content for m in bobs.messages], bobs.entities, bobs.intents) == ([said.content], {}, [])


@pytest.mark.parametrize("backend", ["postgres", "memory", "supabase"])
async def test_a_user_cannot_pass_the_fact_limit_and_others_are_not_affected(
    backend: str, pg_settings: MemorySettings, database_url: str, user_id: UUID
) -> None:
    from postgrest_transport import supabase_store

    store = {"postgres": None, "memory": InMemoryStore(), "supabase": supabase_store(database_url)}[backend]
    settings = pg_settings.model_copy(update={"max_facts_per_user": 5, "embedding_model": "none"})
    async with MemoryManager.open(settings, store=store) as memory:
        await memory.remember_many(user_id, [Note(content=f"Nota {i}") for i in range(4)])
        assert await memory.store.count_facts(user_id) == 4
        with pytest.raises(MemoryLimitError, match="MEMORY_MAX_FACTS_PER_USER"):
            await memory.remember_many(user_id, [Note(content="Nota 4"), Note(content="Nota 5")])
        assert await memory.store.count_facts(user_id) == 4  # nothing of the refused write
        await memory.remember(user_id, "Nota 0")  # a repeat reinforces: no new row, allowed
        await memory.remember(user_id, "Nota 4")  # the fifth row
        assert len(await memory.remember_many(uuid4(), [Note(content=f"Otra {i}") for i in range(5)])) == 5


def test_a_url_is_masked_only_where_it_holds_a_password() -> None:
    from memory_plugin.database.urls import masked_url

    assert masked_url("postgresql://app:S3cret@db:5432/postgres") == "postgresql://app:***@db:5432/postgres"
    assert masked_url("postgresql://postgres:@/memory_plugin?host=/tmp/pg") == (
        "postgresql://postgres:@/memory_plugin?host=/tmp/pg"
    )  # the embedded server's socket URL has none: it stays usable with psql
    masked = masked_url("host=db user=app password=S3cret")
    assert "S3cret" not in masked
    assert "password=***" in masked
    assert masked_url("postgresql://db/postgres?sslmode=require&password=S3cret").endswith("password=***")


async def test_a_user_out_of_write_budget_is_refused_before_the_embedding(user_id: UUID) -> None:
    """A flood of refused writes costs no embedding work: the refusal comes first."""
    from tests.chat_helpers import word_embedder

    embedder = word_embedder()
    calls: list[int] = []
    embed_documents = embedder.embed_documents

    async def counted(texts: Sequence[str]) -> Any:
        calls.append(len(texts))
        return await embed_documents(texts)

    embedder.embed_documents = counted  # type: ignore[method-assign]
    settings = MemorySettings(embedding_model="none", write_burst=2, write_rate_per_second=0.001)
    async with MemoryManager.open(settings, store=InMemoryStore(), embedder=embedder) as memory:
        facts = [
            MemorizedFact(
                content=f"Necesita {n} piezas de latón al mes",
                category="requirement",
                confidence=0.9,
                source="explicit",
            )
            for n in (5, 9)
        ]
        await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=facts))
        assert calls == [2]
        with pytest.raises(MemoryLimitError):
            await memory.update_memory(
                MemoryUpdate(
                    user_id=user_id,
                    new_facts=[
                        MemorizedFact(
                            content="Prefiere acero", category="preference", confidence=0.9, source="explicit"
                        )
                    ],
                )
            )
        assert calls == [2]  # the refused write embedded nothing
