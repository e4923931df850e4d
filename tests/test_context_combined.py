"""One model call per extraction turn: the LLM extractor also rewrites the rolling summary when it is due."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import pytest
import pytest_asyncio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import InMemoryStore, MemoryCapability, MemoryDeps, MemoryManager, MemorySettings
from memory_plugin.context.builder import ContextBuilder
from memory_plugin.context.store import USER_SCOPE, InMemoryContextStore, session_scope
from memory_plugin.extraction import LLMExtractor
from memory_plugin.models import MemorizedFact, MemoryUpdate, Message


@dataclass
class ScriptedExtractor:
    """The extraction model: records each request, answers with facts and (when given) a summary."""

    facts: list[dict[str, Any]] = field(default_factory=list)
    summary: str | None = None
    prompts: list[str] = field(default_factory=list)
    schemas: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.prompts.append(str(messages[-1].parts[-1].content))  # type: ignore[union-attr]
        tool = info.output_tools[0]
        self.schemas.append(tool.parameters_json_schema)
        args: dict[str, Any] = {"facts": self.facts}
        if self.summary is not None:
            args["summary"] = self.summary
        return ModelResponse(parts=[ToolCallPart(tool_name=tool.name, args=args)])


@dataclass
class Counting:
    calls: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return ModelResponse(parts=[TextPart("Resumen del resumidor aparte.")])


SETTINGS = MemorySettings(embedding_model="none", background_extraction=False)
PREFERENCE = {"content": "Prefiere aluminio 7075", "category": "preference", "confidence": 0.95}


@dataclass
class Setup:
    memory: MemoryManager
    builder: ContextBuilder
    extractor: ScriptedExtractor
    summarizer: Counting


@pytest_asyncio.fixture(loop_scope="session")
async def setup() -> AsyncIterator[Setup]:
    script, summarizer = ScriptedExtractor(), Counting()
    extractor = LLMExtractor(FunctionModel(script))
    async with MemoryManager.open(SETTINGS, store=InMemoryStore(), extractor=extractor) as memory:
        builder = ContextBuilder.from_settings(
            memory, InMemoryContextStore(), SETTINGS, model=FunctionModel(summarizer)
        )
        memory._extraction.host_summaries(builder)
        yield Setup(memory, builder, script, summarizer)


async def test_one_model_call_stores_the_facts_and_writes_the_summary(setup: Setup) -> None:
    setup.extractor.facts = [PREFERENCE]
    setup.extractor.summary = "El cliente prefiere aluminio 7075 para los prototipos."
    user, session = uuid4(), f"s-{uuid4()}"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Anotado.")])

    capability = MemoryCapability(setup.memory, context=setup.builder, extract_inline=True)
    agent = Agent(FunctionModel(answer), deps_type=MemoryDeps, capabilities=[capability])
    await agent.run("Recuerda que prefiero aluminio 7075 para los prototipos", deps=MemoryDeps(session, user))

    assert len(setup.extractor.prompts) == 1  # one call for both
    assert setup.summarizer.calls == 0  # the summarizer's own model was not called
    assert "[ROLLING SUMMARY]" in setup.extractor.prompts[0]
    facts = [r.content for r in await setup.memory.list_memory(user) if r.kind == "fact"]
    assert facts == ["Prefiere aluminio 7075"]
    for scope in (session_scope(session), USER_SCOPE):
        current = await setup.builder.store.summary_versions(user, scope)
        assert current[0].content == "El cliente prefiere aluminio 7075 para los prototipos."
        assert current[0].kind == "model"
    built = await setup.builder.build(session, user, query="¿Plazo para 10 piezas?")
    assert "aluminio 7075" in built.instructions


async def test_a_failed_summary_part_keeps_the_previous_version_and_stores_the_facts(setup: Setup) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    await setup.builder.store.add_summary(
        user, session_scope(session), "Resumen anterior.", kind="model", language="es", message_count=0
    )
    setup.extractor.facts = [PREFERENCE]
    setup.extractor.summary = "   "  # an empty summary: nothing usable
    await setup.memory.add_message(
        session, Message(role="user", content="Recuerda que prefiero aluminio 7075"), user_id=user
    )
    run = await setup.memory.extract_if_due(session, user)
    short = await setup.memory.get_short_term(session, user_id=user)
    await setup.builder.after_turn(
        session, user, short.messages, stored=run.stored, superseded=None, summary_done=run.summary_asked
    )

    assert run.summary_asked
    assert run.error is None
    assert [f.content for f in run.stored] == ["Prefiere aluminio 7075"]
    versions = await setup.builder.store.summary_versions(user, session_scope(session))
    assert [v.content for v in versions] == ["Resumen anterior."]
    assert setup.summarizer.calls == 0  # no second call to make up for it: it waits for the next extraction


async def test_the_summary_is_not_requested_when_it_is_not_due(setup: Setup) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    setup.extractor.facts, setup.extractor.summary = [], None
    # Four short questions: the extraction's cadence, but nothing the summary waits for (8 messages,
    # a decision, a topic change, a long exchange).
    for text in ("¿Plazo para 10 bridas?", "¿Y para 20?", "¿Tenéis stock?", "¿Precio unitario?"):
        await setup.memory.add_message(session, Message(role="user", content=text), user_id=user)
    run = await setup.memory.extract_if_due(session, user)

    assert run.trigger == "cadence"
    assert not run.summary_asked
    assert len(setup.extractor.prompts) == 1
    assert "[ROLLING SUMMARY]" not in setup.extractor.prompts[0]
    assert "summary" not in setup.extractor.schemas[0]["properties"]
    assert await setup.builder.store.summary_versions(user, session_scope(session)) == []


async def test_the_rules_extractor_keeps_the_extractive_summary() -> None:
    async with MemoryManager.open(SETTINGS, store=InMemoryStore()) as memory:
        builder = ContextBuilder.from_settings(memory, InMemoryContextStore(), SETTINGS)
        memory._extraction.host_summaries(builder)
        user, session = uuid4(), f"s-{uuid4()}"
        await memory.add_message(
            session, Message(role="user", content="Recuerda que prefiero aluminio 7075"), user_id=user
        )
        run = await memory.extract_if_due(session, user)
        short = await memory.get_short_term(session, user_id=user)
        await builder.after_turn(session, user, short.messages, stored=run.stored, summary_done=run.summary_asked)

        assert not run.summary_asked
        versions = await builder.store.summary_versions(user, session_scope(session))
        assert versions[0].kind == "extractive"


async def test_a_queued_extraction_writes_the_summary_in_its_own_call() -> None:
    script, summarizer = ScriptedExtractor([PREFERENCE], "Prefiere aluminio 7075."), Counting()
    settings = MemorySettings(embedding_model="none", background_extraction=True)
    async with MemoryManager.open(
        settings, store=InMemoryStore(), extractor=LLMExtractor(FunctionModel(script))
    ) as memory:
        builder = ContextBuilder.from_settings(
            memory, InMemoryContextStore(), settings, model=FunctionModel(summarizer)
        )

        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart("Anotado.")])

        agent = Agent(
            FunctionModel(answer), deps_type=MemoryDeps, capabilities=[MemoryCapability(memory, context=builder)]
        )
        user, session = uuid4(), f"s-{uuid4()}"
        await agent.run("Recuerda que prefiero aluminio 7075 para los prototipos", deps=MemoryDeps(session, user))
        assert await memory.flush()

        assert len(script.prompts) == 1
        assert "[ROLLING SUMMARY]" in script.prompts[0]
        assert summarizer.calls == 0
        versions = await builder.store.summary_versions(user, session_scope(session))
        assert [v.content for v in versions] == ["Prefiere aluminio 7075."]
        built = await builder.build(session, user, query="¿Plazo?")
        assert "aluminio 7075" in built.instructions


async def test_jobs_run_by_a_worker_elsewhere_write_the_summary_in_their_own_call(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application only queues (`background_worker=False`); a worker with its own manager and that
    manager's context builder (what `memory-plugin worker` runs) writes the facts and the summary in one call,
    and the application spends no separate summary call on that turn. The worker starts with its manager, so
    the job already queued is leased while the builder opens: it waits for the builder (it used to run without
    it now and then, on a busy machine; here the builder takes half a second to open, so it always would)."""
    from tempfile import mkdtemp

    from tests.background_child import settings_for

    data_dir = mkdtemp(prefix="combined-")
    script, summarizer = ScriptedExtractor([PREFERENCE], "Prefiere aluminio 7075."), Counting()
    app_settings = settings_for(database_url, data_dir, background_worker=False)
    worker_settings = settings_for(database_url, data_dir, background_worker=True)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Anotado.")])

    user, session = uuid4(), f"s-{uuid4()}"
    async with MemoryManager.open(app_settings, extractor=LLMExtractor(FunctionModel(script))) as app:
        app_context = await ContextBuilder.open(
            app, app_settings, database_url=app.database_url, model=FunctionModel(summarizer)
        )
        try:
            agent = Agent(
                FunctionModel(answer), deps_type=MemoryDeps, capabilities=[MemoryCapability(app, context=app_context)]
            )
            await agent.run("Recuerda que prefiero aluminio 7075 para los prototipos", deps=MemoryDeps(session, user))
            assert script.prompts == []  # queued: this process runs no jobs

            opened = ContextBuilder.open.__func__

            async def slow_open(cls: type[ContextBuilder], *args: Any, **kwargs: Any) -> ContextBuilder:
                await asyncio.sleep(0.5)  # the worker polls every 0.1 s: it leases the queued job meanwhile
                return await opened(cls, *args, **kwargs)

            monkeypatch.setattr(ContextBuilder, "open", classmethod(slow_open))
            async with MemoryManager.open(worker_settings, extractor=LLMExtractor(FunctionModel(script))) as worker:
                await worker.context_builder()  # as `memory-plugin worker` does, first thing
                assert await app.flush(timeout=10)  # the job is done, and so are the tasks after the run

            assert len(script.prompts) == 1
            assert "[ROLLING SUMMARY]" in script.prompts[0]
            assert summarizer.calls == 0  # the application did not write one of its own
            versions = await app_context.store.summary_versions(user, session_scope(session))
            assert [v.content for v in versions] == ["Prefiere aluminio 7075."]
            assert [e.text for e in (await app_context.slots(user)).get("preferences")] == ["Prefiere aluminio 7075"]
        finally:
            await app_context.close()


async def test_an_inline_extraction_that_supersedes_a_fact_takes_it_out_of_the_slots(setup: Setup) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    old = MemorizedFact(content="Presupuesto máximo 1000 €", category="constraint", confidence=0.95, source="explicit")
    stored = await setup.memory.update_memory(MemoryUpdate(user_id=user, new_facts=[old]))
    await setup.builder.after_turn(session, user, [], stored=stored)
    # The new budget names no fact in `replaces`: the store supersedes the old one by its slot (`budget`).
    setup.extractor.facts = [{"content": "Presupuesto máximo 2000 €", "category": "constraint", "confidence": 0.95}]
    setup.extractor.summary = None

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Anotado.")])

    capability = MemoryCapability(setup.memory, context=setup.builder, extract_inline=True)
    agent = Agent(FunctionModel(answer), deps_type=MemoryDeps, capabilities=[capability])
    await agent.run("Recuerda que el presupuesto máximo ahora es 2000 €", deps=MemoryDeps(session, user))

    constraints = (await setup.builder.store.read_slots(user)).get("constraints")
    assert [e.text for e in constraints] == ["Presupuesto máximo 2000 €"]


async def test_a_background_jobs_facts_patch_the_slots_without_reading_the_summaries_again() -> None:
    script = ScriptedExtractor([PREFERENCE])
    settings = MemorySettings(embedding_model="none", background_extraction=True, summary_with_extraction=False)
    reads: list[str] = []

    class CountingStore(InMemoryContextStore):
        async def summary_versions(self, user_id: Any, scope: str) -> Any:
            reads.append(scope)
            return await super().summary_versions(user_id, scope)

    async with MemoryManager.open(
        settings, store=InMemoryStore(), extractor=LLMExtractor(FunctionModel(script))
    ) as memory:
        builder = ContextBuilder.from_settings(memory, CountingStore(), settings)
        builder.follow(memory._extraction)
        user, session = uuid4(), f"s-{uuid4()}"
        await memory.record_exchange(session, user, "Recuerda que prefiero aluminio 7075", "Anotado.")
        scheduled = await memory.schedule_extraction(session, user)
        assert scheduled.job_id is not None
        assert await memory.flush()

        slots = await builder.store.read_slots(user)
        assert any("aluminio 7075" in e.text for entries in slots.fields.values() for e in entries)
        # The job asks once whether a summary is due (the user's and the session's versions); patching the
        # slots with its facts reads none: it brought no messages, so no summary could be due.
        assert sorted(reads) == sorted([USER_SCOPE, session_scope(session)])
