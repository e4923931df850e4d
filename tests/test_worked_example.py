"""The shop's worked example gets rejections, one-off quantities, budgets and the user's language right: scripted
two-session conversations in Spanish and English through the real workflow (the real pydantic-ai classifier and
budget agents over the shipped offline `FunctionModel`s, rule-based extraction) on the real Postgres."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID, uuid4

import pytest

from agents.intent import classify_offline, is_rejection
from agents.vocabulary import SHOP_VOCABULARY
from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.rows import MemoryRecord
from workflows.budget_request import BudgetRequestWorkflow, BudgetTurn


@pytest.fixture
def pg_settings(database_url: str, data_dir: Path) -> MemorySettings:
    """The test database, with the shop's vocabulary, as the demo opens its manager."""
    return MemorySettings(database_url=database_url, data_dir=data_dir, vocabulary=SHOP_VOCABULARY)


async def converse(memory: MemoryManager, user: UUID, messages: list[str]) -> list[BudgetTurn]:
    workflow = BudgetRequestWorkflow.build(memory, offline=True, extract_inline=True)
    session = f"s-{uuid4().hex[:8]}"
    return [await workflow.handle(session_id=session, user_id=user, message=m) for m in messages]


def preferred(records: list[MemoryRecord]) -> str:
    """Everything stored as a preference (the preferences record and preference facts), lower-cased."""
    return " ".join(r.content for r in records if r.kind == "preference" or r.category == "preference").lower()


@pytest.mark.parametrize(
    "message",
    [
        "never suggest titanium",
        "Please never suggest stainless steel 304",
        "Nunca me sugieras titanio",
        "No me ofrezcas latón",
        "El acero inoxidable no nos sirve",
    ],
)
def test_a_rejection_is_never_a_preference(message: str) -> None:
    assert is_rejection(message)
    assert not classify_offline(message).explicit_preference
    assert not is_rejection("Prefiero aluminio 7075")


async def test_spanish_rejections_one_off_quantities_and_budget_across_two_sessions(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    await converse(
        pg_memory,
        user_id,
        [
            "Hola, necesito presupuesto para 50 piezas de fresado CNC.",
            "Prefiero aluminio 7075 para los prototipos.",
            "Nunca me sugieras titanio.",
            "No me ofrezcas latón.",
            "El acero inoxidable no nos sirve.",
            "Necesito 40 bridas para el viernes.",
            "Mi presupuesto es de 2000 euros.",
            "Perfecto, lo confirmo: adelante con el pedido.",
        ],
    )
    records = await pg_memory.list_memory(user_id)
    rejections = " ".join(r.content for r in records if r.category == "rejection").lower()
    for material in ("titanio", "latón", "acero inoxidable"):
        assert material in rejections, material
        assert material not in preferred(records), material
    assert "aluminio 7075" in preferred(records)
    # The order's quantities stay in the session: never a lasting requirement.
    assert not [r.content for r in records if r.kind != "project" and "bridas" in r.content.lower()]
    assert [r.content for r in records if r.category == "constraint" and "2000" in r.content]

    (later,) = await converse(pg_memory, user_id, ["Hola, necesito otras 30 piezas"])
    assert later.reply.startswith("¡Hola de nuevo!")
    assert "prefieres aluminio 7075" in later.reply
    assert "en aluminio 7075" in later.reply  # the proposal uses the preference ...
    for material in ("titanio", "latón", "acero inoxidable"):  # ... and never a rejected material
        assert f"prefieres {material}" not in later.reply
        assert f"en {material}" not in later.reply
    assert "no quieres que te propongamos" in later.reply
    assert "2000" in later.reply
    assert "bridas" not in later.memory_block.split("This session:")[0]
    (project,) = [r.content for r in records if r.kind == "project"]
    assert "titanio" not in project
    assert "acero inoxidable" not in project
    assert "aluminio 7075" in project


async def test_english_rejection_and_budget_across_two_sessions_answered_in_english(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    first = await converse(
        pg_memory,
        user_id,
        [
            "Hello, I need a quote for 20 parts of CNC milling.",
            "Please never suggest stainless steel 304.",
            "My budget is 2000 EUR.",
            "I confirm, go ahead.",
        ],
    )
    assert first[0].reply.startswith("Hello!")
    assert first[1].reply.startswith("Understood: I will not suggest stainless steel 304")
    records = await pg_memory.list_memory(user_id)
    assert [r.content for r in records if r.category == "rejection"] == ["Do not suggest stainless steel 304"]
    assert "304" not in preferred(records)
    assert [r.content for r in records if r.category == "constraint"] == ["Their budget is 2000 EUR"]

    (later,) = await converse(pg_memory, user_id, ["Hello again, I need 10 more parts like last time"])
    assert later.reply.startswith("Hello again!")
    assert "you cannot exceed 2000" in later.reply
    assert "in stainless steel 304" not in later.reply
    assert "you do not want stainless steel 304 suggested" in later.reply
    assert "Hola" not in later.reply
    assert "necesito" not in later.reply
