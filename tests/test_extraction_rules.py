"""The offline rule-based extractor: explicit Spanish and English statements become canonical facts."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.extraction import FactExtractor, RuleBasedExtractor, default_extractor
from memory_plugin.extraction.policy import is_explicit_trigger
from memory_plugin.models import FactCategory, MemorizedFact, Message


async def extract(*texts: str, known: tuple[MemorizedFact, ...] = ()) -> list[MemorizedFact]:
    messages = [Message(role="user", content=text) for text in texts]
    outcome = await RuleBasedExtractor().extract(messages, known_facts=known)
    assert outcome.rejected == 0
    assert outcome.model_calls == 0
    return outcome.facts


def contents(facts: list[MemorizedFact]) -> list[str]:
    return [fact.content for fact in facts]


@pytest.mark.parametrize(
    ("text", "content", "category", "confidence"),
    [
        # Spanish
        ("prefiero aluminio 7075 para prototipos", "Prefiere aluminio 7075 para prototipos", "preference", 0.9),
        ("Siempre uso acero inoxidable 316.", "Siempre usa acero inoxidable 316", "preference", 0.95),
        ("Trabajamos siempre con proveedores locales", "Siempre trabaja con proveedores locales", "preference", 0.95),
        ("Necesito tolerancia ±0.05mm", "Necesita tolerancia ±0.05mm", "requirement", 0.9),
        ("necesitamos certificación ISO 9001", "Requiere certificación ISO 9001", "requirement", 0.9),
        ("Exigimos trazabilidad de material", "Requiere trazabilidad de material", "requirement", 0.9),
        ("no puedo superar 1000€", "No puede superar 1000€", "constraint", 0.9),
        ("Mi presupuesto máximo es 1000 €", "No puede superar 1000 €", "constraint", 0.9),
        ("La última entrega llegó tarde.", "Opinión: la última entrega llegó tarde", "feedback", 0.9),
        # English
        ("I prefer 6061 aluminium", "Prefers 6061 aluminium", "preference", 0.9),
        ("I always use titanium grade 5", "Always uses titanium grade 5", "preference", 0.95),
        ("We need a tolerance of ±0.01 mm.", "Needs a tolerance of ±0.01 mm", "requirement", 0.9),
        ("we require ISO 9001 certification", "Requires ISO 9001 certification", "requirement", 0.9),
        ("I can't exceed $2,000", "Cannot exceed $2,000", "constraint", 0.9),
        ("My budget is limited to 1500 EUR", "Cannot exceed 1500 EUR", "constraint", 0.9),
        ("The last delivery arrived late", "Feedback: the last delivery arrived late", "feedback", 0.9),
    ],
)
async def test_explicit_statement_becomes_a_canonical_fact(
    text: str, content: str, category: FactCategory, confidence: float
) -> None:
    [fact] = await extract(text)
    assert fact.content == content
    assert fact.category == category
    assert fact.confidence == confidence
    assert fact.source == "explicit"
    assert fact.importance == (4 if category in ("requirement", "constraint") else 3)


async def test_provenance_is_the_message_id_and_timestamp() -> None:
    said_at = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
    first = Message(role="user", content="Prefiero aluminio 7075", timestamp=said_at, id="msg-1")
    second = Message(role="user", content="I can't exceed $2,000", id="msg-2")
    outcome = await RuleBasedExtractor().extract([first, second])
    by_content = {fact.content: fact for fact in outcome.facts}
    assert by_content["Prefiere aluminio 7075"].source_message_ids == ("msg-1",)
    assert by_content["Prefiere aluminio 7075"].timestamp == said_at
    assert by_content["Cannot exceed $2,000"].source_message_ids == ("msg-2",)
    assert by_content["Cannot exceed $2,000"].timestamp == second.timestamp


async def test_the_same_statement_in_two_messages_is_one_fact_citing_both() -> None:
    messages = [
        Message(role="user", content="Prefiero aluminio 7075.", id="a"),
        Message(role="user", content="Como dije, prefiero Aluminio 7075", id="b"),
    ]
    outcome = await RuleBasedExtractor().extract(messages)
    [fact] = outcome.facts
    assert fact.source_message_ids == ("a", "b")


@pytest.mark.parametrize(
    "text",
    [
        "¿Prefieres aluminio o acero?",
        "¿Necesito certificación ISO 9001 para esto?",
        "Do you prefer 6061 or 7075?",
        "Do I need ISO 9001 certification?",
        "Do you think we need a tolerance of ±0.01 mm, or is ±0.05 enough?",
    ],
)
async def test_questions_are_not_statements(text: str) -> None:
    assert await extract(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "No necesito certificación ISO 9001",
        "Si necesito tolerancias más finas os aviso",
        "Tal vez prefiero el 6061",
        "If we need ISO 9001 certification we will tell you",
        "I preferred steel back then",
        "Necesito un presupuesto para 50 piezas",
        "Necesito 200 unidades para el viernes",
        "I need a quote for 20 parts",
        "I need to check with my boss",
        "Prefiero que me llaméis mañana",
        "El pedido anterior fue de 50 piezas",  # a past order, no judgement: not feedback
        "Hola, ¿qué tal?",
    ],
)
async def test_negated_conditional_and_one_off_requests_are_not_facts(text: str) -> None:
    assert await extract(text) == []


async def test_assistant_and_system_messages_are_ignored() -> None:
    messages = [
        Message(role="assistant", content="Prefiero recomendar aluminio 7075 y necesito tolerancia ±0.05mm."),
        Message(role="system", content="We require ISO 9001 certification."),
        Message(role="user", content="Perfecto, gracias."),
    ]
    outcome = await RuleBasedExtractor().extract(messages)
    assert outcome.facts == []


async def test_restated_known_facts_come_back_in_the_stored_wording() -> None:
    # Same wording, so the same content hash: the store reinforces the known row instead of adding one.
    known = (MemorizedFact(content="prefiere aluminio 7075", category="preference", confidence=0.9, source="explicit"),)
    facts = await extract("Prefiero Aluminio 7075. Necesito tolerancia ±0.05mm", known=known)
    assert contents(facts) == ["prefiere aluminio 7075", "Necesita tolerancia ±0.05mm"]


async def test_several_statements_in_one_message() -> None:
    facts = await extract(
        "Prefiero aluminio 7075 y necesito tolerancia ±0.05mm. Además, no puedo superar 1000€, "
        "pero siempre uso acero 316 para ejes. ¿Tenéis stock?"
    )
    assert contents(facts) == [
        "Prefiere aluminio 7075",
        "Necesita tolerancia ±0.05mm",
        "No puede superar 1000€",
        "Siempre usa acero 316 para ejes",
    ]
    assert {fact.source_message_ids for fact in facts} == {facts[0].source_message_ids}


async def test_and_inside_an_object_does_not_split_it() -> None:
    assert contents(await extract("Prefiero aluminio y acero inoxidable")) == ["Prefiere aluminio y acero inoxidable"]
    assert contents(await extract("I prefer 6061 aluminium and we need a tolerance of ±0.01 mm")) == [
        "Prefers 6061 aluminium",
        "Needs a tolerance of ±0.01 mm",
    ]


async def test_object_is_cut_at_the_end_of_its_clause() -> None:
    assert contents(await extract("Prefiero aluminio 7075 porque es ligero")) == ["Prefiere aluminio 7075"]
    assert contents(await extract("I prefer 6061 aluminium, but 7075 is fine too")) == ["Prefers 6061 aluminium"]
    assert contents(await extract("Necesitamos certificación ISO 9001 por favor")) == [
        "Requiere certificación ISO 9001"
    ]


async def test_statement_around_a_question_in_the_same_message_is_kept() -> None:
    assert contents(await extract("¿Tenéis 7075 en stock? Prefiero aluminio 7075 para prototipos.")) == [
        "Prefiere aluminio 7075 para prototipos"
    ]
    assert contents(await extract("Prefiero aluminio 7075, ¿tenéis stock?")) == ["Prefiere aluminio 7075"]


@pytest.mark.parametrize("text", ["Prefiero ese aluminio", "Prefiero eso", "I prefer that one", "I need it by Monday"])
async def test_references_to_the_current_conversation_are_not_lasting_facts(text: str) -> None:
    # "Prefiere ese aluminio" would mean nothing in a later conversation.
    assert await extract(text) == []


async def test_overlong_capture_is_ignored() -> None:
    assert await extract("Prefiero " + "aluminio " * 30) == []


def test_default_extractor_is_rules_without_a_model() -> None:
    extractor = default_extractor(None)
    assert isinstance(extractor, RuleBasedExtractor)
    assert isinstance(extractor, FactExtractor)
    assert extractor.name == "rules"


# Explicit memory requests: what follows "remember that…" is kept, in the third person, with a category from its
# words; an explicit trigger of the extraction policy, so a manager stores it at once.
MEMORY_REQUESTS = [
    ("Remember that my budget is 2000 EUR per order", "Their budget is 2000 EUR per order", "constraint"),
    ("Please remember we are in the aerospace sector", "They are in the aerospace sector", "fact"),
    ("recuerda que mi contacto de compras es Ana García", "Su contacto de compras es Ana García", "contact"),
    ("Apunta que preferimos recibir los presupuestos por email", "Prefiere recibir los presupuestos por email",
     "preference"),
    ("Ten en cuenta que cerramos en agosto", "Cierra en agosto", "fact"),
    ("Por favor, recuerda que facturamos a 60 días", "Factura a 60 días", "fact"),
    ("Keep in mind our dock closes at 3pm", "Their dock closes at 3pm", "fact"),
    ("Don't forget that we order 500 units every month", "They order 500 units every month", "routine"),
    ("Remember that we need ISO 9001", "Needs ISO 9001", "requirement"),  # a statement the rules know
    ("Recuerda que trabajamos siempre con 7075", "Siempre trabaja con 7075", "preference"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "content", "category"), MEMORY_REQUESTS)
async def test_an_explicit_memory_request_is_stored_through_the_manager(
    pg_settings: MemorySettings, user_id: UUID, text: str, content: str, category: FactCategory
) -> None:
    assert is_explicit_trigger(text)  # the policy extracts at once...
    async with MemoryManager.open(pg_settings, extractor=RuleBasedExtractor()) as memory:
        session = f"s-{uuid4()}"
        await memory.add_message(session, Message(role="user", content=text), user_id=user_id)
        run = await memory.extract_if_due(session, user_id)
        # ... and the extractor finds the fact: one user message, no cadence, stored in this turn.
        assert run.trigger == "explicit"
        [fact] = run.stored
        assert (fact.content, fact.category, fact.confidence) == (content, category, 0.95)
        stored = [(f.content, f.category) for f in (await memory.get_memory_context("next", user_id)).long_term.facts]
        assert stored == [(content, category)]


@pytest.mark.parametrize(
    "text",
    [
        "necesito otras 10 piezas",  # the quantity under discussion is never stored
        "Necesito unas veinte unidades más",
        "I need 10 more parts",
        "Ten en cuenta que necesito otras 10 piezas",
        "Recuerda que son otras 10 piezas",
        "Remember this",  # points into the conversation
        "Recuerda eso",
        "Remember that supplier in Bilbao",  # a thing, not something about the user
        "Recuerda que si necesitamos más piezas os aviso",  # conditional
        "¿Recuerdas mi presupuesto?",  # a question
    ],
)
async def test_quantities_pointers_and_questions_are_never_stored_even_when_asked(text: str) -> None:
    assert await extract(text) == []


async def test_a_quantity_that_recurs_is_a_routine_not_the_request() -> None:
    [fact] = await extract("Recuerda que pedimos 500 piezas cada mes")
    assert (fact.content, fact.category) == ("Pide 500 piezas cada mes", "routine")
