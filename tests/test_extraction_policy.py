"""The extraction policy: when a model call happens, what it is given, what comes back, what is stored.

The extractor model is a counting `FunctionModel`; memory lives in the embedded Postgres.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate, Message
from memory_plugin.extraction import LLMExtractor, RuleBasedExtractor
from memory_plugin.extraction.policy import is_explicit_trigger, is_small_talk
from memory_plugin.taxonomy import FACT_CATEGORIES, TAXONOMY, render_taxonomy_for_prompt

AdminConn = psycopg.Connection[tuple[Any, ...]]


@dataclass
class CountingModel:
    """Extraction model: counts calls, keeps each prompt, answers `facts(prompt)` (default: nothing)."""

    facts: Callable[[str], list[dict[str, Any]]] = lambda prompt: []
    prompts: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    gate: asyncio.Event | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = "\n".join(
            str(part.content)
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        )
        self.prompts.append(prompt)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.started.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"facts": self.facts(prompt)})])
        finally:
            self.in_flight -= 1


@pytest.fixture
def counting() -> CountingModel:
    return CountingModel()


async def say(memory: MemoryManager, session: str, user_id: UUID, text: str, when: datetime | None = None) -> Message:
    message = Message(role="user", content=text, **({"timestamp": when} if when else {}))
    await memory.add_message(session, message, user_id=user_id)
    await memory.add_message(session, Message(role="assistant", content="Entendido."), user_id=user_id)
    return message


def manager(settings: MemorySettings, model: CountingModel) -> Any:
    return MemoryManager.open(settings, extractor=LLMExtractor(FunctionModel(model, model_name="counting")))


# --- triggers ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Recuerda que trabajamos siempre con 7075",
        "No me sugieras acero 1045, por favor",
        "Ya no usamos latón",
        "A partir de ahora las piezas van anodizadas",
        "De ahora en adelante, facturas a Marta",
        "Tened en cuenta que cerramos en agosto",
        "Remember that we need ISO 9001",
        "Please don't suggest powder coating",
        "We no longer use brass",
        "From now on, send quotes in PDF",
        "Keep in mind our dock closes at 3pm",
    ],
)
def test_memory_instructions_are_explicit_triggers(text: str) -> None:
    assert is_explicit_trigger(text)


@pytest.mark.parametrize(
    "text",
    [
        "Please remember we are in the aerospace sector",
        "Do not forget that our plant closes in August",
        "Apúntalo: trabajamos con Airbus",
        "Apuntad que el contacto es Ana",
        "Tengan en cuenta que facturamos a 60 días",
    ],
)
async def test_every_memory_request_the_offline_extractor_reads_is_an_explicit_trigger(text: str) -> None:
    # A request the rule-based extractor turns into a fact must also make the policy extract at once.
    outcome = await RuleBasedExtractor().extract([Message(role="user", content=text)])
    assert len(outcome.facts) == 1
    assert is_explicit_trigger(text)


@pytest.mark.parametrize(
    "text",
    ["Prefiero aluminio 7075", "Necesito 50 piezas", "De 100 piezas en adelante hay descuento", "I need a quote"],
)
def test_ordinary_statements_are_not_triggers(text: str) -> None:
    assert not is_explicit_trigger(text)


def test_extra_trigger_phrases_from_settings() -> None:
    assert is_explicit_trigger("Anota que el plano cambió", extra=("anota que",))
    assert not is_explicit_trigger("Anota que el plano cambió")


@pytest.mark.parametrize("text", ["¡Muchas gracias!", "ok, perfecto", "Hola, buenos días", "Thanks a lot", "vale"])
def test_small_talk(text: str) -> None:
    assert is_small_talk(text)


@pytest.mark.parametrize("text", ["Gracias, y recuerda el anodizado", "ok, 50 piezas", "Prefiero 7075"])
def test_not_small_talk(text: str) -> None:
    assert not is_small_talk(text)


# --- batching and cadence -----------------------------------------------------------------------------------------
async def test_cadence_counts_user_messages_and_batches_everything_pending(
    pg_settings: MemorySettings, user_id: UUID, counting: CountingModel
) -> None:
    async with manager(pg_settings, counting) as memory:
        session = f"s-{uuid4()}"
        sent = []
        for i, text in enumerate(["Necesito 50 bridas", "Gracias", "En acero 316L", "Con rosca M8", "Y planos"]):
            sent.append(await say(memory, session, user_id, text))
            run = await memory.extract_if_due(session, user_id)
            if i < 4:
                assert run.trigger is None
        assert run.trigger == "cadence"
        assert len(counting.prompts) == 1
        # One call with every message not extracted yet: 5 user messages and their 5 answers.
        assert run.messages == 10
        assert all(f"[{m.id}] user" in counting.prompts[0] for m in sent)

        await say(memory, session, user_id, "Otra cosa: 20 ejes")
        assert (await memory.extract_if_due(session, user_id)).trigger is None
        assert len(counting.prompts) == 1


async def test_explicit_trigger_fires_at_once_and_the_cursor_prevents_rereading(
    pg_settings: MemorySettings, user_id: UUID, counting: CountingModel
) -> None:
    async with manager(pg_settings, counting) as memory:
        session = f"s-{uuid4()}"
        first = await say(memory, session, user_id, "Necesito 50 bridas en 316L")
        await memory.extract_if_due(session, user_id)
        second = await say(memory, session, user_id, "Recuerda: no me sugieras acero 1045")
        run = await memory.extract_if_due(session, user_id)
        assert (run.trigger, run.messages, len(counting.prompts)) == ("explicit", 4, 1)
        assert first.id in counting.prompts[0]
        assert second.id in counting.prompts[0]

        third = await say(memory, session, user_id, "A partir de ahora, todo anodizado")
        await memory.extract_if_due(session, user_id)
        assert len(counting.prompts) == 2
        assert third.id in counting.prompts[1]
        assert first.id not in counting.prompts[1]
        assert (memory.stats.extractions_explicit, memory.stats.extraction_model_calls) == (2, 2)


async def test_small_talk_only_is_skipped_without_a_call(
    pg_settings: MemorySettings, user_id: UUID, counting: CountingModel
) -> None:
    async with manager(pg_settings, counting) as memory:
        session = f"s-{uuid4()}"
        for text in ["Hola", "Gracias", "Vale, perfecto", "¡Genial!"]:
            await say(memory, session, user_id, text)
        run = await memory.extract_if_due(session, user_id, end_of_request=True)
        assert run.skipped
        assert counting.prompts == []
        assert memory.stats.extractions_skipped == 1


async def test_end_of_request_extracts_what_is_pending(
    pg_settings: MemorySettings, user_id: UUID, counting: CountingModel
) -> None:
    async with manager(pg_settings, counting) as memory:
        session = f"s-{uuid4()}"
        await say(memory, session, user_id, "Prefiero 7075 para prototipos")
        assert (await memory.extract_if_due(session, user_id)).trigger is None
        assert (await memory.extract_if_due(session, user_id, end_of_request=True)).trigger == "end_of_request"
        assert len(counting.prompts) == 1


async def test_at_most_one_extraction_in_flight_per_session(pg_settings: MemorySettings, user_id: UUID) -> None:
    model = CountingModel(gate=asyncio.Event())
    async with manager(pg_settings, model) as memory:
        session = f"s-{uuid4()}"
        await say(memory, session, user_id, "Recuerda que siempre pedimos certificado 3.1")
        first = asyncio.create_task(memory.extract_if_due(session, user_id))
        second = asyncio.create_task(memory.extract_if_due(session, user_id))
        await model.started.wait()
        await say(memory, session, user_id, "Y recuerda que las cajas van etiquetadas")  # arrives while the call runs
        third = asyncio.create_task(memory.extract_if_due(session, user_id))
        await asyncio.sleep(0.01)
        assert model.in_flight == 1
        model.gate.set()  # type: ignore[union-attr]
        runs = await asyncio.gather(first, second, third)

        assert model.max_in_flight == 1
        # The first call took the first message; the waiting triggers then made one call for the new one.
        assert len(model.prompts) == 2
        assert "etiquetadas" not in model.prompts[0]
        assert "certificado" not in model.prompts[1]
        assert "etiquetadas" in model.prompts[1]
        assert sorted(r.trigger or "-" for r in runs) == ["-", "explicit", "explicit"]


async def test_a_failed_extraction_keeps_the_messages_pending(
    pg_settings: MemorySettings, user_id: UUID, caplog: pytest.LogCaptureFixture
) -> None:
    answers = iter(["broken", "broken", "good"])  # one call + one retry fail, then a good answer

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if next(answers) == "broken":
            return ModelResponse(parts=[TextPart("I think they like aluminium")])
        facts = [{"content": "Requiere certificado 3.1", "category": "requirement", "confidence": 0.9}]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"facts": facts})])

    async with MemoryManager.open(pg_settings, extractor=LLMExtractor(FunctionModel(respond))) as memory:
        session = f"s-{uuid4()}"
        first = await say(memory, session, user_id, "Recuerda que siempre pedimos certificado 3.1")
        with caplog.at_level(logging.WARNING, logger="memory_plugin"):
            run = await memory.extract_if_due(session, user_id)
        assert run.error is not None
        assert "UnexpectedModelBehavior" in run.error
        assert memory.stats.extraction_failures == 1
        assert "extraction (explicit) failed" in caplog.text
        assert await memory.list_memory(user_id) == []

        await say(memory, session, user_id, "Y recuerda: anodizado negro")
        run = await memory.extract_if_due(session, user_id)
        assert run.error is None
        [fact] = run.stored
        assert first.id in fact.source_message_ids  # retried with the old messages: nothing was lost
        assert run.messages == 4


# --- what the model is given and what is kept ----------------------------------------------------------------------
async def test_the_extractor_gets_candidate_facts_with_ids_and_replaces_is_validated(
    pg_settings: MemorySettings, user_id: UUID
) -> None:
    known: dict[str, UUID] = {}

    def facts(prompt: str) -> list[dict[str, Any]]:
        return [
            {
                "content": "No puede superar 2000 € por pedido",
                "category": "constraint",
                "confidence": 0.9,
                "replaces": str(known["budget"]),
            },
            {"content": "Prefiere 6082", "category": "preference", "confidence": 0.9, "replaces": str(uuid4())},
        ]

    model = CountingModel(facts=facts)
    async with manager(pg_settings, model) as memory:
        [old] = await memory.update_memory(
            MemoryUpdate(
                user_id=user_id,
                new_facts=[
                    MemorizedFact(
                        content="No puede superar 1000 € por pedido",
                        category="constraint",
                        confidence=0.9,
                        source="explicit",
                    )
                ],
            )
        )
        known["budget"] = old.id
        session = f"s-{uuid4()}"
        await say(memory, session, user_id, "Ya no: el presupuesto ahora es de 2000 € por pedido")
        run = await memory.extract_if_due(session, user_id)

        assert f"[{old.id}] (constraint) No puede superar 1000 € por pedido" in model.prompts[0]
        assert memory.stats.extraction_fields_dropped == 1  # the invented id
        kept = {f.content for f in run.stored}
        assert kept == {"No puede superar 2000 € por pedido", "Prefiere 6082"}


async def test_llm_items_are_validated_one_by_one_with_reasons() -> None:
    t0 = datetime(2026, 11, 23, 9, tzinfo=UTC)
    messages = [Message(id="m1", role="user", content="Estaré fuera este fin de semana", timestamp=t0)]
    known = [MemorizedFact(content="Prefiere 7075", category="preference", confidence=0.9, source="explicit")]
    items = [
        {
            "content": "Estará fuera el fin de semana del 2026-11-28",
            "category": "fact",
            "confidence": 0.9,
            "expires_at": "2026-11-30T00:00:00",
        },
        {"content": "Estará fuera", "category": "fact", "confidence": 0.9, "expires_at": "last year"},
        {"content": "Estuvo fuera", "category": "fact", "confidence": 0.9, "expires_at": "2020-01-01T00:00:00Z"},
        {"content": "Prefiere 6061", "category": "preference", "confidence": 0.9, "replaces": str(known[0].id)},
        {"content": "Le gusta el café", "category": "hobby", "confidence": 0.9},
        {"content": "Prefiere 5083", "category": "preference", "confidence": 1.5},
        {"content": "", "category": "preference", "confidence": 0.9},
    ]
    model = CountingModel(facts=lambda prompt: items)
    outcome = await LLMExtractor(FunctionModel(model)).extract(messages, known_facts=known)

    trip, no_expiry, past_expiry, replacing = outcome.facts
    assert trip.expires_at == datetime(2026, 11, 30, tzinfo=UTC)  # a bare time is the message's timezone
    assert (no_expiry.expires_at, past_expiry.expires_at) == (None, None)
    assert replacing.replaces == known[0].id
    assert outcome.dropped_fields == {"expires_at": 2}
    assert outcome.rejections == {"unknown_category": 1, "bad_confidence": 1, "empty": 1}
    assert outcome.rejected == 3
    assert trip.importance == TAXONOMY["fact"].default_importance
    assert "2026-11-23T09:00:00+00:00" in model.prompts[0]  # message timestamps reach the model


def test_the_extraction_prompt_lists_every_category() -> None:
    prompt = render_taxonomy_for_prompt()
    assert all(f'"{name}"' in prompt for name in FACT_CATEGORIES)
    assert len(FACT_CATEGORIES) == 10


# --- provenance, dates and expiry, in the table ------------------------------------------------------------------
async def test_provenance_conversation_time_and_resolved_dates_are_stored(
    pg_memory: MemoryManager, user_id: UUID, admin_conn: AdminConn
) -> None:
    said_at = datetime(2026, 3, 2, 11, 30, tzinfo=UTC)  # a Monday, months before the write
    session = f"s-{uuid4()}"
    message = await say(pg_memory, session, user_id, "Estaré fuera este fin de semana.", when=said_at)
    await pg_memory.remember_from_session(session, user_id)

    row = admin_conn.execute(
        "select content, category, source_message_ids, occurred_at, expires_at from public.user_memory"
        " where user_id = %s",
        (user_id,),
    ).fetchone()
    assert row == (
        "Estará fuera el fin de semana del 2026-03-07",
        "fact",
        [message.id],
        said_at,
        datetime(2026, 3, 9, tzinfo=UTC),
    )
    # Long expired: it never reaches the prompt.
    context = await pg_memory.get_memory_context(session, user_id)
    assert context.long_term.facts == []


async def test_a_current_temporary_fact_reaches_the_prompt_until_it_expires(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    session = f"s-{uuid4()}"
    await say(pg_memory, session, user_id, "I'll be away next week.")
    [fact] = await pg_memory.remember_from_session(session, user_id)
    assert fact.content.startswith("Will be away the week of ")
    assert fact.expires_at is not None
    assert fact.expires_at > datetime.now(UTC) + timedelta(days=1)
    context = await pg_memory.get_memory_context(session, user_id)
    assert [f.content for f in context.long_term.facts] == [fact.content]


async def test_bad_items_are_counted_by_reason_and_the_good_ones_stored(
    pg_settings: MemorySettings, user_id: UUID
) -> None:
    items = [
        {"content": "Requiere ISO 9001", "category": "requirement", "confidence": 0.9},
        {"content": "Le gusta el pádel", "category": "hobby", "confidence": 0.9},
        {"content": "x" * 600, "category": "fact", "confidence": 0.9},
        {"content": "Quizá prefiera latón", "category": "preference", "confidence": 0.3},  # below the threshold
    ]
    async with manager(pg_settings, CountingModel(facts=lambda prompt: items)) as memory:
        session = f"s-{uuid4()}"
        await say(memory, session, user_id, "Recuerda que necesitamos ISO 9001")
        run = await memory.extract_if_due(session, user_id)
        assert [f.content for f in run.stored] == ["Requiere ISO 9001"]
        assert memory.stats.extraction_rejections == {"unknown_category": 1, "too_long": 1}
        assert memory.stats.facts_rejected == 3
