"""Sensitive data never reaches long-term memory, on any write path; health data only as a non-clinical note.

Checked in the table itself (a superuser connection reads what was really written), in Spanish and English,
with the near misses a machining conversation is full of.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import (
    InMemoryStore,
    MemorizedFact,
    MemoryCapability,
    MemoryDeps,
    MemoryManager,
    MemorySettings,
    MemoryUpdate,
    Message,
    ProjectRecord,
    UserPreferences,
)
from memory_plugin.extraction import LLMExtractor
from memory_plugin.privacy import sanitize_fact_text

AdminConn = psycopg.Connection[tuple[Any, ...]]


def stored(admin_conn: AdminConn, user: UUID) -> dict[str, str]:
    """content -> category of every row the user has, read past RLS."""
    rows = admin_conn.execute("select content, category from public.user_memory where user_id = %s", (user,))
    return dict(rows.fetchall())


def everything(admin_conn: AdminConn, user: UUID) -> str:
    """Every text the user's rows hold (content, attributes, metadata), as one string."""
    rows = admin_conn.execute(
        "select content || ' ' || attributes::text || ' ' || metadata::text from public.user_memory where user_id = %s",
        (user,),
    )
    return " ".join(r[0] for r in rows.fetchall())


def fact(content: str, category: Any = "fact") -> MemorizedFact:
    return MemorizedFact(content=content, category=category, confidence=0.9, source="explicit")


# --- the policy, pure ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "note"),
    [
        (
            "Tiene diabetes tipo 1 y no puede hacer turnos de noche",
            "Tiene una condición médica que afecta a los turnos",
        ),
        (
            "Toma sintrom y no puede levantar peso ni viajar",
            "Tiene una condición médica que afecta a los viajes y al trabajo físico",
        ),
        ("Está de baja por una hernia discal", "Tiene una condición médica que afecta a la disponibilidad"),
        ("Has epilepsy, so he cannot travel by plane", "Has a medical condition that affects travel"),
        ("Takes 20 mg of fluoxetine; prefers no calls before 10", "Has a medical condition that affects meetings"),
        (
            "Tested positive for covid, meetings must be online this month",
            "Has a medical condition that affects meetings",
        ),
    ],
)
def test_clinical_details_become_a_non_clinical_health_note(text: str, note: str) -> None:
    result = sanitize_fact_text(text, "fact")
    assert (result.text, result.category) == (note, "health_note")
    assert result.clinical


@pytest.mark.parametrize(
    "text",
    [
        "Toma metformina 850 mg dos veces al día",
        "Su glucosa en ayunas fue 180 en la última analítica",
        "Diagnosed with type 2 diabetes last year",
        "HbA1c of 7.2% in the last blood test",
    ],
)
def test_clinical_details_with_nothing_useful_are_dropped(text: str) -> None:
    result = sanitize_fact_text(text, "fact")
    assert result.text is None
    assert result.dropped == "clinical"


@pytest.mark.parametrize(
    "text",
    [
        "Prefiere tratamiento térmico de temple y revenido",
        "Presión de trabajo de 200 bar en los cilindros",
        "Prueba de dureza 58 HRC en cada lote",
        "Inspección por rayos X de todas las soldaduras",
        "Stroke length of 50 mm on the press",
        "Análisis dimensional con informe en cada entrega",
        "Aleación AZ91 con 9 % Al y 1 % Zn",
        "Prefiere no viajar por motivos de salud",  # already a non-clinical note
        "Referencia de pieza 4111 1111 1111 1112",  # fails Luhn: a part number, not a card
        "La clave es mantener tolerancias de ±0.01 mm",  # "clave" = key point, not a password
        "The key is to keep tolerances tight",
        "Cuenta ES91 2100 0418 4502 0005 1333 del proveedor",  # wrong IBAN check digits
        "El pin es de acero 1.2379",
    ],
)
def test_near_misses_are_stored_unchanged(text: str) -> None:
    result = sanitize_fact_text(text, "requirement")
    assert (result.text, result.category, result.redacted, result.clinical) == (text, "requirement", (), ())


def test_a_non_clinical_health_note_is_kept() -> None:
    text = "Tiene una condición médica que afecta a los turnos"
    assert sanitize_fact_text(text, "health_note").text == text


# --- every write path, on Postgres ---------------------------------------------------------------------------------
async def test_update_memory_redacts_and_reduces_before_writing(
    pg_memory: MemoryManager, user_id: UUID, admin_conn: AdminConn
) -> None:
    await pg_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            new_facts=[
                fact("Para los pedidos usad mi tarjeta 4111 1111 1111 1111"),
                fact("Domiciliad las facturas en ES91 2100 0418 4502 0005 1332"),
                fact("La contraseña del portal de proveedores es Arkc!2024"),
                fact("Our ERP api key is sk-proj-4fT9xQ2mZ7LbV1cR8sWk3nHy"),
                fact("Tiene diabetes tipo 1 y no puede hacer turnos de noche"),
                fact("Toma metformina 850 mg dos veces al día"),
                fact("4111 1111 1111 1111"),
                fact("Referencia de pieza 4111 1111 1111 1112", "requirement"),
            ],
        )
    )
    assert stored(admin_conn, user_id) == {
        "Para los pedidos usad mi tarjeta [redacted payment_card]": "fact",
        "Domiciliad las facturas en [redacted iban]": "fact",
        "La contraseña del portal de proveedores es [redacted password]": "fact",
        "Our ERP api key is [redacted api_key]": "fact",
        "Tiene una condición médica que afecta a los turnos": "health_note",
        "Referencia de pieza 4111 1111 1111 1112": "requirement",
    }
    s = pg_memory.stats
    assert (s.facts_redacted, s.facts_dropped_sensitive, s.facts_health_reduced, s.facts_dropped_health) == (4, 1, 1, 1)


async def test_preferences_projects_and_patterns_are_redacted_too(
    pg_memory: MemoryManager, user_id: UUID, admin_conn: AdminConn
) -> None:
    await pg_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            preferences=UserPreferences(location="Bilbao, DNI 12345678Z"),
            project=ProjectRecord(description="50 bridas, pagar con 4111 1111 1111 1111", quantity="50"),
            patterns=["budget_request: IBAN ES9121000418450200051332"],
        )
    )
    text = everything(admin_conn, user_id)
    for secret in ("12345678Z", "4111 1111", "ES9121000418450200051332"):
        assert secret not in text
    assert "Bilbao, DNI [redacted national_id]" in text
    assert pg_memory.stats.items_redacted == 1


async def test_the_remember_tool_goes_through_the_filter(
    pg_memory: MemoryManager, user_id: UUID, admin_conn: AdminConn
) -> None:
    calls = iter(
        [
            ("remember", {"fact": "Paga con la Visa 4539 1488 0343 6467", "category": "fact"}),
            ("remember", {"fact": "Has epilepsy and cannot travel by plane", "category": "health_note"}),
        ]
    )

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        call = next(calls, None)
        if call is None:
            return ModelResponse(
                parts=[TextPart(" | ".join(str(p.content) for p in last.parts if isinstance(p, ToolReturnPart)))]
            )
        return ModelResponse(parts=[ToolCallPart(*call)])

    agent = Agent(FunctionModel(respond), deps_type=MemoryDeps, capabilities=[MemoryCapability(pg_memory, tools=True)])
    await agent.run("Apúntalo", deps=MemoryDeps(session_id=f"s-{uuid4()}", user_id=user_id))

    rows = stored(admin_conn, user_id)
    assert rows["Paga con la Visa [redacted payment_card]"] == "fact"
    assert rows["Has a medical condition that affects travel"] == "health_note"
    assert "4539" not in everything(admin_conn, user_id)
    assert "epilepsy" not in everything(admin_conn, user_id)


async def test_extractor_output_is_filtered_and_its_input_redacted(
    pg_settings: MemorySettings, user_id: UUID, admin_conn: AdminConn
) -> None:
    prompts: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts.append(str(messages[-1]))
        facts = [
            # A model that copies what it should not: the manager still filters it.
            {"content": "Paga con la tarjeta 4111 1111 1111 1111", "category": "fact", "confidence": 0.9},
            {"content": "Tiene asma y no puede trabajar en turnos con polvo", "category": "fact", "confidence": 0.9},
            {"content": "Requiere ISO 9001", "category": "requirement", "confidence": 0.9},
        ]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"facts": facts})])

    async with MemoryManager.open(pg_settings, extractor=LLMExtractor(FunctionModel(model))) as memory:
        session = f"s-{uuid4()}"
        await memory.add_message(
            session, Message(role="user", content="Recuerda: cobrad a la 4111 1111 1111 1111"), user_id=user_id
        )
        await memory.remember_from_session(session, user_id)

    assert "4111" not in prompts[0]
    assert stored(admin_conn, user_id) == {
        "Paga con la tarjeta [redacted payment_card]": "fact",
        "Tiene una condición médica que afecta a los turnos": "health_note",
        "Requiere ISO 9001": "requirement",
    }


async def test_sanitize_fact_is_the_public_hook(ram_memory: MemoryManager) -> None:
    original = fact("Mi DNI es 12345678Z y prefiero facturas en PDF")
    clean = ram_memory.sanitize_fact(original)
    assert clean is not None
    assert clean.content == "Mi DNI es [redacted national_id] y prefiero facturas en PDF"
    assert clean.id == original.id  # the same fact, cleaned
    assert ram_memory.sanitize_fact(fact("Toma ibuprofeno 600 mg")) is None
    assert ram_memory.sanitize_fact(fact("Prefiere aluminio 7075")) is not None
    assert (ram_memory.stats.facts_redacted, ram_memory.stats.facts_dropped_health) == (1, 1)


async def test_prepare_fact_applies_the_whole_write_policy(ram_memory: MemoryManager, user_id: UUID) -> None:
    said = datetime(2026, 11, 23, 9, tzinfo=UTC)  # a Monday
    trip = MemorizedFact(
        content="Estará fuera este fin de semana; tarjeta 4111 1111 1111 1111",
        category="fact",
        confidence=0.9,
        source="explicit",
        timestamp=said,
    )
    ready = ram_memory.prepare_fact(trip, user_id)
    assert ready is not None
    assert ready.content == "Estará fuera el fin de semana del 2026-11-28; tarjeta [redacted payment_card]"
    assert ready.expires_at == datetime(2026, 11, 30, tzinfo=UTC)
    assert ready.importance >= 4  # temporary facts rank high while they hold
    assert ready.user_id == user_id
    low = MemorizedFact(content="Quizá prefiera latón", category="preference", confidence=0.3, source="inferred")
    assert ram_memory.prepare_fact(low, user_id) is None


async def test_relative_dates_follow_the_configured_timezone(user_id: UUID) -> None:
    said = MemorizedFact(
        content="Recoge las piezas mañana",
        category="fact",
        confidence=0.9,
        source="explicit",
        timestamp=datetime(2026, 11, 23, 23, 30, tzinfo=UTC),  # already 00:30 on the 24th in Madrid
    )
    async with MemoryManager.open(MemorySettings(), store=InMemoryStore()) as utc_memory:
        in_utc = utc_memory.prepare_fact(said, user_id)
    async with MemoryManager.open(MemorySettings(date_timezone="Europe/Madrid"), store=InMemoryStore()) as memory:
        in_madrid = memory.prepare_fact(said, user_id)
    assert in_utc is not None
    assert in_madrid is not None
    assert in_utc.content == "Recoge las piezas el 2026-11-24"
    assert in_madrid.content == "Recoge las piezas el 2026-11-25"
    with pytest.raises(ValueError, match="unknown timezone"):
        MemorySettings(date_timezone="Europe/Atlantis")


async def test_logs_never_print_a_facts_text(
    ram_memory: MemoryManager, user_id: UUID, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    low_confidence = MemorizedFact(content="Mi DNI es 12345678Z", category="fact", confidence=0.1, source="inferred")
    await ram_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            new_facts=[
                low_confidence,
                fact("Paga con la tarjeta 4111 1111 1111 1111"),
                fact("Toma metformina 850 mg dos veces al día"),
            ],
        )
    )
    assert caplog.records  # the rejections and redactions were logged…
    for secret in ("12345678Z", "4111", "metformina", "850 mg"):
        assert secret not in caplog.text  # …without the text they were about
