"""The budget-request workflow end to end: the seed's seven steps on the real Postgres, models mocked.

The classifier and the budget agent run as real pydantic-ai agents over `FunctionModel`s: scripted ones where a
test needs to control the classification, the shipped offline ones where the test is about the demo's behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from pydantic_ai.exceptions import ModelAPIError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agents.budget_agent import build_budget_agent, offline_reply
from agents.fact_extractor import build_fact_extractor
from agents.intent import Classification, build_intent_classifier, classify_offline
from agents.models import last_user_prompt, resolve_agent_model
from agents.vocabulary import SHOP_VOCABULARY
from memory_plugin import InvalidMemoryInputError, MemoryManager, MemorySettings, StoreUnavailableError
from workflows.budget_request import BudgetRequestWorkflow


@pytest.fixture
def pg_settings(database_url: str, data_dir: Path) -> MemorySettings:
    """The test database, with the shop's vocabulary, as the demo opens its manager."""
    return MemorySettings(database_url=database_url, data_dir=data_dir, vocabulary=SHOP_VOCABULARY)


def scripted_classifier(script: dict[str, Classification], log: list[str] | None = None) -> FunctionModel:
    """Answers the classification scripted for each message (the output tool call a real model would make)."""

    def classify(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if log is not None:
            log.append("classifier")
        result = script[last_user_prompt(messages)]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, result.model_dump())])

    return FunctionModel(classify)


@dataclass
class BudgetModel:
    """The budget agent's model: answers a fixed text and keeps the instructions of every request."""

    answer: str = "Perfecto, ¿para cuándo lo necesitas?"
    log: list[str] | None = None
    instructions: list[str] = field(default_factory=list)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.log is not None:
            self.log.append("budget_model")
        self.instructions.append(info.instructions or "")
        return ModelResponse(parts=[TextPart(self.answer)])


def workflow_for(
    memory: MemoryManager, script: dict[str, Classification], budget: BudgetModel, log: list[str] | None = None
) -> BudgetRequestWorkflow:
    return BudgetRequestWorkflow(
        memory=memory,
        classifier=build_intent_classifier(scripted_classifier(script, log)),
        budget_agent=build_budget_agent(memory, FunctionModel(budget)),
        extract_inline=True,  # these tests read each turn's facts from the turn itself
    )


def cls(
    intent: str = "budget_request", complete: bool = False, explicit: bool = False, **entities: Any
) -> Classification:
    return Classification.model_validate(
        {"intent": intent, "entities": entities, "request_complete": complete, "explicit_preference": explicit}
    )


def spy_on(memory: MemoryManager, monkeypatch: pytest.MonkeyPatch, log: list[str]) -> None:
    """Log every call the seven steps make, in order, by the manager method's name: extraction and writes are
    logged where every path reaches them (the extraction runner and the write pipeline)."""
    targets: list[tuple[object, str, str]] = [
        (memory, "get_memory_context", "get_memory_context"),
        (memory, "add_message", "add_message"),
        (memory, "update_session_intents", "update_session_intents"),
        (memory, "update_session_entities", "update_session_entities"),
        (memory._extraction, "extract", "extract_facts_from_conversation"),
        (memory._writer, "update", "update_memory"),
    ]
    for owner, attribute, name in targets:
        original = getattr(owner, attribute)

        async def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            log.append(_name)
            return await _original(*args, **kwargs)

        monkeypatch.setattr(owner, attribute, spy)
    original_format: Callable[..., str] = memory.format_memory_for_agent

    def format_spy(*args: Any, **kwargs: Any) -> str:
        log.append("format_memory_for_agent")
        return original_format(*args, **kwargs)

    monkeypatch.setattr(memory, "format_memory_for_agent", format_spy)


async def test_the_seven_steps_run_in_order(
    pg_memory: MemoryManager, user_id: UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[str] = []
    session = f"s-{uuid4()}"
    message = "Recuerda: prefiero aluminio 7075 para los prototipos."
    budget = BudgetModel(log=log)
    workflow = workflow_for(pg_memory, {message: cls(explicit=True, materials=["aluminio 7075"])}, budget, log)
    spy_on(pg_memory, monkeypatch, log)

    turn = await workflow.handle(session_id=session, user_id=user_id, message=message)

    assert log[:6] == [
        "get_memory_context",  # 1
        "add_message",  # 2
        "classifier",  # 3
        "update_session_intents",
        "update_session_entities",
        "format_memory_for_agent",  # 4
    ]
    assert log[log.index("budget_model") :] == [
        "budget_model",  # 5
        "add_message",  # 6
        "extract_facts_from_conversation",  # 7: a memory instruction ("Recuerda") triggers extraction
        "update_memory",  # the facts
        "update_memory",  # the stated materials (no model needed)
    ]
    # When the budget model ran, the session already held the message and its entities, not yet the answer.
    [seen] = budget.instructions
    assert "This session: intents: budget_request; materials: aluminio 7075" in seen
    assert f"- user: {message}" in seen
    assert "- assistant:" not in seen
    # The block returned for display is the one the model received.
    assert turn.memory_block
    assert turn.memory_block in seen
    assert turn.reply == budget.answer


async def test_each_message_is_recorded_once(pg_memory: MemoryManager, user_id: UUID) -> None:
    session = f"s-{uuid4()}"
    workflow = workflow_for(pg_memory, {"Hola": cls("greeting")}, BudgetModel(answer="¡Hola! ¿En qué te ayudo?"))

    turn = await workflow.handle(session_id=session, user_id=user_id, message="Hola")

    short = await pg_memory.get_short_term(session, user_id=user_id)
    assert [(m.role, m.content) for m in short.messages] == [
        ("user", "Hola"),
        ("assistant", "¡Hola! ¿En qué te ayudo?"),
    ]
    assert short.intents == ["greeting"]
    assert turn.messages_seen == 2


async def test_facts_are_persisted_after_the_fourth_user_message(pg_memory: MemoryManager, user_id: UUID) -> None:
    session = f"s-{uuid4()}"
    first = "Necesitamos tolerancia ±0.01 mm en los ejes."
    others = ["Serán 40 unidades.", "En acero 1.4301.", "Con planos."]
    workflow = workflow_for(
        pg_memory, {first: cls(tolerances=["±0.01 mm"]), **{m: cls() for m in others}}, BudgetModel()
    )

    for message in [first, *others[:2]]:
        turn = await workflow.handle(session_id=session, user_id=user_id, message=message)
        assert (turn.extracted, turn.facts_stored) == (False, [])
    assert await pg_memory.list_memory(user_id) == []

    turn2 = await workflow.handle(session_id=session, user_id=user_id, message=others[2])
    assert turn2.extracted
    assert turn2.messages_seen == 8
    [fact] = turn2.facts_stored
    assert (fact.category, fact.content) == ("requirement", "Necesita tolerancia ±0.01 mm en los ejes")
    first_message = (await pg_memory.get_short_term(session, user_id=user_id)).messages[0]
    assert fact.source_message_ids == (first_message.id,)
    assert [r.content for r in await pg_memory.list_memory(user_id)] == [fact.content]


async def test_explicit_preference_is_stored_at_once_and_its_fact_at_the_end_of_the_request(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    message, confirm = "Prefiero latón para los casquillos.", "Lo confirmo, adelante."
    workflow = workflow_for(
        pg_memory, {message: cls(explicit=True, materials=["latón"]), confirm: cls(complete=True)}, BudgetModel()
    )
    session = f"s-{uuid4()}"

    turn = await workflow.handle(session_id=session, user_id=user_id, message=message)

    # The stated material needs no model: stored now. The fact waits for a trigger (no model call yet).
    assert (turn.extracted, turn.facts_stored) == (False, [])
    stored = {(r.kind, r.category, r.content) for r in await pg_memory.list_memory(user_id)}
    assert stored == {("preference", "preferred_materials", "latón")}

    turn = await workflow.handle(session_id=session, user_id=user_id, message=confirm)
    assert turn.extracted  # the end of the request
    assert [f.content for f in turn.facts_stored] == ["Prefiere latón para los casquillos"]


async def test_extraction_does_not_reinforce_the_same_message_twice(pg_memory: MemoryManager, user_id: UUID) -> None:
    session = f"s-{uuid4()}"
    first, second = "Prefiero aluminio 6061.", "Necesitamos certificación ISO 9001 en todas las piezas."
    workflow = workflow_for(
        pg_memory,
        {
            first: cls(explicit=True, materials=["aluminio 6061"]),
            second: cls(complete=True),
            "Lo confirmo, adelante.": cls(complete=True),
        },
        BudgetModel(),
    )
    await workflow.handle(session_id=session, user_id=user_id, message=first)
    await workflow.handle(session_id=session, user_id=user_id, message=second)  # extracts both messages
    # Extracts again, but only the messages after the cursor: the first two are not re-read.
    await workflow.handle(session_id=session, user_id=user_id, message="Lo confirmo, adelante.")

    facts = {r.content: r.relevance_count for r in await pg_memory.list_memory(user_id) if r.kind == "fact"}
    assert facts == {"Prefiere aluminio 6061": 0, "Requiere certificación ISO 9001 en todas las piezas": 0}


async def test_completed_request_stores_project_and_pattern(pg_memory: MemoryManager, user_id: UUID) -> None:
    session = f"s-{uuid4()}"
    first, confirm = "Necesito 200 piezas de aluminio 6061 anodizado.", "Lo confirmo, adelante."
    workflow = workflow_for(
        pg_memory,
        {
            first: cls(materials=["aluminio 6061"], services=["anodizado"], quantity=["200 piezas"]),
            confirm: cls(complete=True),
        },
        BudgetModel(),
    )
    await workflow.handle(session_id=session, user_id=user_id, message=first)
    turn = await workflow.handle(session_id=session, user_id=user_id, message=confirm)

    assert turn.extracted
    records = await pg_memory.list_memory(user_id)
    [project] = [r for r in records if r.kind == "project"]
    assert project.content == "200 piezas de anodizado en aluminio 6061"
    assert project.attributes["materials"] == ["aluminio 6061"]
    assert project.attributes["quantity"] == "200 piezas"
    assert project.session_id == session
    assert [r.content for r in records if r.kind == "pattern"] == ["budget_request: anodizado"]


async def test_second_session_receives_first_session_memory(pg_memory: MemoryManager, user_id: UUID) -> None:
    preference = "Recuerda que prefiero aluminio 7075 para los prototipos."
    again = "Hola, necesito otras 30 piezas como las anteriores"
    budget = BudgetModel()
    workflow = workflow_for(
        pg_memory,
        {preference: cls(explicit=True, materials=["aluminio 7075"]), again: cls(quantity=["30 piezas"])},
        budget,
    )
    await workflow.handle(session_id=f"s1-{uuid4()}", user_id=user_id, message=preference)

    turn = await workflow.handle(session_id=f"s2-{uuid4()}", user_id=user_id, message=again)

    seen = budget.instructions[-1]
    assert "Prefiere aluminio 7075 para los prototipos" in seen
    assert "Preferences: materials: aluminio 7075" in seen
    assert f"- user: {preference}" not in seen  # session 1's messages stay in session 1
    assert "Prefiere aluminio 7075 para los prototipos" in turn.memory_block


async def test_failing_extraction_model_keeps_the_reply_and_warns(pg_settings: MemorySettings, user_id: UUID) -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelAPIError("extraction-model", "503 Service Unavailable")

    message = "A partir de ahora, prefiero titanio grado 5."
    async with MemoryManager.open(pg_settings, extractor=build_fact_extractor(FunctionModel(broken))) as memory:
        session = f"s-{uuid4()}"
        budget = BudgetModel(answer="Anotado: titanio grado 5.")
        workflow = workflow_for(memory, {message: cls(explicit=True, materials=["titanio grado 5"])}, budget)

        turn = await workflow.handle(session_id=session, user_id=user_id, message=message)

        assert turn.reply == "Anotado: titanio grado 5."
        assert turn.facts_stored == []
        assert any("fact extraction failed" in w and "503" in w for w in turn.warnings)
        short = await memory.get_short_term(session, user_id=user_id)
        assert [m.role for m in short.messages] == ["user", "assistant"]
        # What did not need the model (the stated preference) is still remembered.
        assert [r.content for r in await memory.list_memory(user_id)] == ["titanio grado 5"]
        assert memory.stats.extraction_failures == 1


async def test_store_failure_while_persisting_keeps_the_reply(
    pg_memory: MemoryManager, user_id: UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError("Postgres is unreachable: connection refused")

    monkeypatch.setattr(pg_memory, "update_memory", down)
    message = "Prefiero PEEK."
    workflow = workflow_for(pg_memory, {message: cls(explicit=True, materials=["PEEK"])}, BudgetModel(answer="Ok."))

    turn = await workflow.handle(session_id=f"s-{uuid4()}", user_id=user_id, message=message)

    assert turn.reply == "Ok."
    assert any("could not store memory" in w and "unreachable" in w for w in turn.warnings)


async def test_failing_classifier_falls_back_to_the_offline_rules(pg_memory: MemoryManager, user_id: UUID) -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelAPIError("classifier-model", "timeout")

    message = "Necesito 50 piezas en aluminio 7075"
    workflow = BudgetRequestWorkflow(
        memory=pg_memory,
        classifier=build_intent_classifier(FunctionModel(broken)),
        budget_agent=build_budget_agent(pg_memory, FunctionModel(BudgetModel())),
        extract_inline=True,
    )
    session = f"s-{uuid4()}"

    turn = await workflow.handle(session_id=session, user_id=user_id, message=message)

    assert turn.classification == classify_offline(message)
    assert any("intent classifier failed" in w for w in turn.warnings)
    assert (await pg_memory.get_short_term(session, user_id=user_id)).entities["materials"] == ["aluminio 7075"]


async def test_bad_user_id_is_refused_before_anything_is_recorded(pg_memory: MemoryManager) -> None:
    workflow = workflow_for(pg_memory, {}, BudgetModel())
    session = f"s-{uuid4()}"
    with pytest.raises(InvalidMemoryInputError, match="UUID"):
        await workflow.handle(session_id=session, user_id="not-a-uuid", message="Hola")
    assert (await pg_memory.get_short_term(session)).messages == []


# --- the offline models (what the demo runs) -----------------------------------------------------------------

SESSION_1 = [
    "Hola, necesito presupuesto para 50 piezas de fresado CNC con tolerancia ±0.05 mm.",
    "Prefiero aluminio 7075 para los prototipos.",
    "Necesitamos certificación ISO 9001 en todas las piezas.",
    "No puedo superar 1500€ por pedido.",
    "Perfecto, lo confirmo: adelante con el pedido para el viernes.",
]


async def test_offline_models_reuse_session_one_in_session_two(pg_memory: MemoryManager, user_id: UUID) -> None:
    workflow = BudgetRequestWorkflow.build(pg_memory, offline=True, extract_inline=True)
    # A first-time customer: greeted as new, asked only for what the message did not say.
    first = await workflow.handle(session_id=f"new-{uuid4()}", user_id=uuid4(), message=SESSION_1[0])
    assert "de nuevo" not in first.reply
    assert "el material" in first.reply
    assert "el plazo de entrega" in first.reply
    assert "la cantidad" not in first.reply
    assert "la tolerancia" not in first.reply

    session = f"s1-{uuid4()}"
    for message in SESSION_1:
        turn = await workflow.handle(session_id=session, user_id=user_id, message=message)
    assert turn.classification.request_complete

    later = await workflow.handle(
        session_id=f"s2-{uuid4()}", user_id=user_id, message="Hola, necesito otras 30 piezas como las anteriores"
    )

    assert later.reply.startswith("¡Hola de nuevo!")
    for remembered in ("aluminio 7075", "ISO 9001", "1500 €", "±0.05 mm", "30 piezas"):
        assert remembered in later.reply, remembered
    # Material, tolerance and quantity are known: only the deadline is asked for.
    assert "solo me falta: el plazo de entrega." in later.reply
    assert "el material" not in later.reply


def test_offline_reply_without_memory_block_treats_the_user_as_new() -> None:
    reply = offline_reply(None, "Necesito 10 piezas de torneado")
    assert reply.startswith("¡Hola! Gracias por contactar con Arkcutt.")
    assert "10 piezas de torneado CNC" in reply
    assert "el material, la tolerancia y el plazo de entrega" in reply


@pytest.mark.parametrize(
    ("text", "intent", "entities", "complete", "explicit"),
    [
        (
            "Hola, necesito presupuesto para 50 piezas de fresado CNC con tolerancia ±0.05 mm.",
            "budget_request",
            {"services": ["fresado CNC"], "quantity": ["50 piezas"], "tolerances": ["±0.05 mm"]},
            False,
            False,
        ),
        (
            "Prefiero aluminio 7075 para los prototipos.",
            "budget_request",
            {"materials": ["aluminio 7075"]},
            False,
            True,
        ),
        ("No puedo superar 1.500 EUR por pedido", "budget_request", {"budget": ["1500 €"]}, False, True),
        ("Perfecto, lo confirmo: adelante.", "budget_request", {}, True, False),
        (
            "We need 200 pcs in stainless steel 316, ±0,01mm, AS9100, budget $2,000, by Friday",
            "budget_request",
            {
                "materials": ["stainless steel 316"],
                "quantity": ["200 units"],
                "tolerances": ["±0.01 mm"],
                "certifications": ["AS9100"],
                "budget": ["$2000"],
                "deadline": ["by friday"],
            },
            False,
            False,
        ),
        ("¿Dónde está mi pedido nº 1234?", "order_status", {}, False, False),
        ("La última entrega llegó tarde", "feedback", {}, False, False),
        (
            "¿Qué es mejor para agua salada, inox 316L o titanio?",
            "technical_question",
            {"materials": ["acero inoxidable 316L", "titanio"]},
            False,
            False,
        ),
        ("Hola", "greeting", {}, False, False),
        ("No lo confirmo todavía", "other", {}, False, False),
    ],
)
def test_offline_classifier(
    text: str, intent: str, entities: dict[str, list[str]], complete: bool, explicit: bool
) -> None:
    assert classify_offline(text) == Classification.model_validate(
        {"intent": intent, "entities": entities, "request_complete": complete, "explicit_preference": explicit}
    )


def test_classification_keeps_only_known_entity_kinds() -> None:
    c = Classification.model_validate(
        {"intent": "other", "entities": {"material": [" aluminio 7075 ", "Aluminio 7075"], "colour": ["red"]}}
    )
    assert c.entities == {"materials": ["aluminio 7075"]}


def test_agent_model_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_agent_model(MemorySettings(agent_model="openai:gpt-4.1"), environ={"OPENAI_API_KEY": "k"}) == (
        "openai:gpt-4.1"
    )
    assert resolve_agent_model(MemorySettings(), environ={"OPENAI_API_KEY": "k"}) == "openai:gpt-4o-mini"
    assert resolve_agent_model(MemorySettings(), environ={}) is None
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert resolve_agent_model(MemorySettings()) is None


def test_fact_extractor_is_offline_without_a_model() -> None:
    assert build_fact_extractor(None).name == "rules"
    assert build_fact_extractor("openai:gpt-4o-mini").name == "llm:openai:gpt-4o-mini"


async def test_a_workflow_without_the_shop_vocabulary_says_so(caplog: pytest.LogCaptureFixture) -> None:
    from memory_plugin import InMemoryStore

    for settings, warned in ((MemorySettings(), True), (MemorySettings(vocabulary=SHOP_VOCABULARY), False)):
        caplog.clear()
        async with MemoryManager.open(settings, store=InMemoryStore()) as memory:
            BudgetRequestWorkflow.build(memory, offline=True)
        assert ("does not use the shop's vocabulary" in caplog.text) is warned


async def test_each_turn_leaves_a_checkpoint_another_worker_resumes_from(
    pg_memory: MemoryManager, pg_settings: MemorySettings, user_id: UUID
) -> None:
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    from memory_plugin.chats.checkpoints import PostgresCheckpointStore

    assert pg_settings.database_url is not None
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        pg_settings.database_url.get_secret_value(),
        min_size=1,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
    )
    await pool.open(wait=True)
    try:
        keep = pg_memory.settings.max_checkpoints
        workflow = BudgetRequestWorkflow.build(pg_memory, offline=True, extract_inline=True)
        workflow.checkpoints = PostgresCheckpointStore(pool)
        session = f"s1-{uuid4()}"
        for message in SESSION_1:
            await workflow.handle(session_id=session, user_id=user_id, message=message)

        resumed = await PostgresCheckpointStore(pool).latest(user_id, session)  # e.g. a worker after a restart
        assert resumed is not None
        assert resumed.state["question"] == SESSION_1[-1]
        assert resumed.state["route"] == "budget_request"
        assert resumed.state["request_complete"] is True
        assert resumed.state["output"]
        assert len(await PostgresCheckpointStore(pool).list_checkpoints(user_id, session)) == min(len(SESSION_1), keep)
        assert await PostgresCheckpointStore(pool).latest(uuid4(), session) is None  # another user: nothing
    finally:
        await pool.close()
