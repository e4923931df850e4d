"""Memory quality rules beyond the shared store contract: the near-duplicate threshold and its guard, parity of
the Python trigram similarity with `pg_trgm`, slot detection, the maintenance job, and the rules end to end with
an LLM extractor (pydantic-ai FunctionModel) on the embedded PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from agents.vocabulary import SHOP_VOCABULARY, with_shop_vocabulary
from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate, Message
from memory_plugin.cli import app
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.extraction import LLMExtractor
from memory_plugin.outage.journal import JournalEntry
from memory_plugin.quality import DecayPolicy, detect_slot, match_guard, match_key, trigram_similarity
from memory_plugin.quality.matching import _float4, is_near_duplicate, keys_of, match_words, no_word_swapped
from memory_plugin.quality.rules import WriteRules
from memory_plugin.quality.vocabulary import DEFAULT_VOCABULARY, SubjectSlot, ValueSlot, Vocabulary, named_values
from memory_plugin.write.items import items_from_update

AdminConn = psycopg.Connection[tuple[Any, ...]]
THRESHOLD = MemorySettings().near_duplicate_threshold

# Rewordings that keep their words: merged at the default threshold (similarity in the comment).
CAUGHT = [
    ("Prefiere aluminio 7075", "Prefiere el aluminio 7075"),  # 0.88
    ("Prefiere aluminio 7075", "Prefiere usar aluminio 7075"),  # 0.82
    ("Prefiere acabado anodizado negro", "Prefiere un acabado anodizado en negro"),  # 0.83
    ("Necesita certificado de material", "Necesita certificados de material"),  # 0.91
    ("Trabaja en el sector aeroespacial", "Trabaja para el sector aeroespacial"),  # 0.82
    ("Pide entregas los lunes", "Pide las entregas los lunes"),  # 0.92
    ("Prefers 7075 aluminium", "Prefers aluminium 7075"),  # 1.0: word order does not matter
    ("Prefers anodized black finish", "Prefers a black anodized finish"),  # 0.97
    ("Needs a material certificate with every order", "Needs material certificates with every order"),  # 0.89
    ("Wants deliveries on Mondays", "Wants deliveries on Monday"),  # 0.90
]
# Paraphrases with other words: NOT merged (they need embedding similarity, once embeddings exist).
MISSED = [
    ("Prefiere aluminio 7075", "Le gusta el aluminio 7075"),  # 0.40
    ("Necesita certificado de material", "Requiere certificado del material"),  # 0.52
    ("Works in the aerospace industry", "Works in the aerospace sector"),  # 0.62
    ("Prefiere recibir los presupuestos por email", "Prefiere recibir presupuestos por correo electrónico"),  # 0.54
]
# Different facts that look alike: never merged, by the threshold or by the guard.
KEPT_APART = [
    ("Prefiere acabado anodizado negro", "Prefiere acabado anodizado rojo"),  # 0.69
    ("Prefers anodized black finish", "Prefers anodized red finish"),  # 0.73: the closest, hence 0.8
    ("Pide entregas los lunes", "Pide entregas los martes"),  # 0.65
    ("Necesita certificado de material", "Necesita certificado de calidad"),  # 0.60
    ("Works in the aerospace industry", "Works in the automotive industry"),  # 0.53
    ("Prefiere aluminio 7075", "Prefiere aluminio 6061"),  # guard: another alloy
    ("Tornillos M8 de acero inoxidable A2", "Tornillos M6 de acero inoxidable A2"),  # guard: another part code
    ("Tolerancia de 0,05 mm en los ejes", "Tolerancia de 0,5 mm en los ejes"),  # guard: "05" is not "5"
    ("Prefiere aluminio 7075", "No prefiere aluminio 7075"),  # guard: negation (0.89 otherwise)
    ("Accepts partial deliveries", "Doesn't accept partial deliveries"),  # guard: negation
    # 0.81 on trigrams (long sentences differing in one word), but "viernes" was swapped for "lunes".
    ("Recibe entregas solo los viernes por la mañana", "Recibe entregas solo los lunes por la mañana"),
    (
        "Requires a material certificate with every aluminium order",
        "Requires a material certificate with every steel order",
    ),
]


def near(a: str, b: str, threshold: float = THRESHOLD) -> bool:
    return is_near_duplicate(keys_of(a, SHOP_VOCABULARY), keys_of(b, SHOP_VOCABULARY), threshold)


@pytest.mark.parametrize(("a", "b"), CAUGHT)
def test_rewordings_are_near_duplicates(a: str, b: str) -> None:
    assert near(a, b)
    assert near(b, a)


@pytest.mark.parametrize(("a", "b"), MISSED + KEPT_APART)
def test_other_wordings_and_different_facts_are_not(a: str, b: str) -> None:
    assert not near(a, b)


def test_the_default_threshold_separates_the_corpus_with_a_margin() -> None:
    caught = min(trigram_similarity(match_key(a), match_key(b)) for a, b in CAUGHT)
    # Pairs that only the threshold keeps apart (same numbers and negation, no word swapped): none of the
    # corpus, once the guards apply; the closest substitution scores 0.81, above the threshold.
    only_threshold = [
        (a, b)
        for a, b in KEPT_APART
        if match_guard(a, SHOP_VOCABULARY) == match_guard(b, SHOP_VOCABULARY)
        and no_word_swapped(match_words(a), match_words(b))
    ]
    assert only_threshold == []
    apart = max(trigram_similarity(match_key(a), match_key(b)) for a, b in KEPT_APART[:5])  # swaps of short facts
    assert apart < THRESHOLD <= caught
    assert (caught - THRESHOLD, THRESHOLD - apart) > (0.01, 0.05)


def test_content_words_ignore_articles_and_inflections() -> None:
    assert match_words("Necesita los certificados del material") == ("certi", "mater", "neces")
    assert match_words("Needs a material certificate") == ("certi", "mater", "needs")
    assert no_word_swapped(match_words("Prefiere aluminio 7075"), match_words("Prefiere usar el aluminio 7075"))
    assert not no_word_swapped(match_words("Pide entregas los lunes"), match_words("Pide entregas los martes"))


def test_the_guard_holds_numbers_codes_and_negation() -> None:
    def match_guard_shop(content: str) -> str:
        return match_guard(content, SHOP_VOCABULARY)

    assert match_guard_shop("Prefiere Aluminio 7075") == "+|7075,@aluminium"
    # Named values (weekdays, months, colours, finishes, materials), one name across languages.
    assert match_guard_shop("Recibe entregas los lunes") == "+|@mon"
    assert match_guard_shop("Prefiere anodizado negro") == match_guard_shop("Prefers black anodizing") == "+|@black"
    assert match_guard_shop("Ya no usa el 7075") == "-|7075"
    assert match_guard_shop("Doesn't want M8 bolts") == "-|m8"
    assert match_guard_shop("Presupuesto de 1.500 €") == "+|1,500"
    assert match_guard_shop("Never suggest titanium") == "-|@titanium"
    # Proper names: two contacts (or companies) never merge, however alike the sentences.
    assert match_guard_shop("Contacto de compras: Ana García") == "+|^ana,^garcia"
    assert match_guard_shop("Contacto de compras: Ana García") != match_guard_shop("Contacto de compras: Luis Pérez")
    assert match_guard_shop("Trabaja para Airbus") == match_guard_shop("Su cliente principal es Airbus") == "+|^airbus"


def test_the_default_vocabulary_knows_no_domain() -> None:
    # Weekdays, months and colours are anyone's values, budgets and lead times anyone's slots ...
    assert match_guard("Recibe entregas los lunes") == "+|@mon"
    assert match_guard("Prefers black anodizing") == "+|@black"
    assert detect_slot("Budget is now 2000 EUR per order", "constraint") == "budget"
    assert detect_slot("Plazo de entrega máximo 3 semanas", "requirement") == "lead_time"
    # ... materials are the shop's: without its vocabulary they name nothing and fill no slot.
    assert match_guard("Never suggest titanium") == "-|"
    assert detect_slot("Prefiere aluminio 7075", "preference") is None
    assert detect_slot("Prefiere aluminio 7075", "preference", SHOP_VOCABULARY) == "material:7075"


def test_a_domain_brings_its_own_values_and_slots() -> None:
    import re

    bakery = DEFAULT_VOCABULARY.extended(
        values=named_values({"rye": "centeno rye", "spelt": "espelta spelt"}),
        slots=(
            ValueSlot("flour", frozenset({"preference"}), re.compile(r"\b(prefiere|prefers)\b"), {"centeno": "rye"}),
            SubjectSlot("oven", frozenset({"fact"}), re.compile(r"\bhorno\b"), needs_number=False),
        ),
    )
    assert match_guard("Pan de centeno", bakery) != match_guard("Pan de espelta", bakery)
    assert match_guard("Pan de centeno", bakery) == match_guard("Rye bread", bakery) == "+|@rye"
    assert detect_slot("Prefiere harina de centeno", "preference", bakery) == "flour:rye"
    assert detect_slot("Tiene un horno de leña", "fact", bakery) == "oven"
    assert detect_slot("Presupuesto de 300 €", "constraint", bakery) == "budget"  # the generic slots stay
    assert isinstance(DEFAULT_VOCABULARY, Vocabulary)
    assert "centeno" not in DEFAULT_VOCABULARY.values


async def test_the_manager_uses_the_configured_vocabulary(user_id: UUID) -> None:
    from memory_plugin import InMemoryStore

    stances = [
        MemorizedFact(content="Prefiere aluminio 7075", category="preference", confidence=0.9, source="explicit"),
        MemorizedFact(content="Ya no usa aluminio 7075", category="preference", confidence=0.9, source="explicit"),
    ]
    current: dict[str, list[str]] = {}
    for name, settings in (("default", MemorySettings()), ("shop", MemorySettings(vocabulary=SHOP_VOCABULARY))):
        async with MemoryManager.open(settings, store=InMemoryStore()) as memory:
            for stance in stances:
                await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[stance]))
            current[name] = sorted(f.content for f in (await memory.get_memory_context("s", user_id)).long_term.facts)
    # Only the shop knows that both facts are the stance on one material: the newer supersedes the older.
    assert current == {"default": [s.content for s in stances], "shop": ["Ya no usa aluminio 7075"]}


def test_python_trigram_similarity_equals_pg_trgm(admin_conn: AdminConn) -> None:
    pairs = CAUGHT + MISSED + KEPT_APART + [("Ñandú güero", "nandu guero"), ("", "algo"), ("a", "a")]
    for a, b in pairs:
        row = admin_conn.execute("select extensions.similarity(%s, %s)", (match_key(a), match_key(b))).fetchone()
        assert row is not None
        # pg_trgm returns a float4; psycopg reads its shortest decimal form, which rounds back to the same float4.
        assert trigram_similarity(match_key(a), match_key(b)) == _float4(float(row[0])), (a, b)


@pytest.mark.parametrize(
    ("content", "category", "slot"),
    [
        ("Presupuesto máximo de 1000€", "constraint", "budget"),
        ("El presupuesto ahora es de 2.000 EUR", "constraint", "budget"),
        ("Budget is now 2000 EUR per order", "constraint", "budget"),
        ("Can spend up to 5k per batch", "constraint", "budget"),
        ("Pide presupuestos de fresado CNC", "constraint", None),  # asks for quotes: no amount, no slot
        ("Plazo de entrega máximo 3 semanas", "requirement", "lead_time"),
        ("Needs a lead time under 10 days", "requirement", "lead_time"),
        ("Prefiere aluminio 7075", "preference", "material:7075"),
        ("Ya no usa 7075", "preference", "material:7075"),
        ("Prefers 7075 aluminium", "preference", "material:7075"),
        ("No me sugieras titanio", "rejection", "material:titanium"),
        ("Never suggest titanium", "rejection", "material:titanium"),
        ("Prefiere acero inoxidable 316L", "preference", "material:316l"),
        ("Prefiere latón para los racores", "preference", "material:brass"),
        ("Prefiere 7075 a 6061", "preference", None),  # two materials: no single slot
        ("Necesita certificado de material del 7075", "requirement", None),  # about paperwork, not the stance
        ("Le gustó el último pedido de 7075", "feedback", None),  # feedback is history, never a slot
        ("Prefiere acabado anodizado negro", "preference", None),
    ],
)
def test_slot_detection(content: str, category: str, slot: str | None) -> None:
    assert detect_slot(content, category, SHOP_VOCABULARY) == slot


def test_journal_entries_keep_the_quality_fields() -> None:
    fact = MemorizedFact(
        content="Presupuesto máximo 1000 EUR",
        category="constraint",
        confidence=0.9,
        source="explicit",
        replaces=uuid4(),
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
    )
    items = items_from_update([fact], None, None, [], None)
    entry = JournalEntry(
        write_id=uuid4(), user_id=uuid4(), items=tuple(items), rules=WriteRules(reinforcement_step=0.1)
    )
    again = JournalEntry.from_json(entry.to_json())
    assert again == entry
    assert (again.items[0].slot, again.items[0].replaces) == ("budget", fact.replaces)


# --- maintenance -----------------------------------------------------------------------------------------------------


async def test_maintenance_archives_decayed_and_expired_facts_and_changes_no_context(
    pg_memory: MemoryManager, database_url: str, user_id: UUID
) -> None:
    now = datetime.now(UTC)
    old = now - timedelta(days=700)

    def fact(content: str, **kw: Any) -> MemorizedFact:
        return MemorizedFact(content=content, confidence=kw.pop("confidence", 0.9), source="explicit", **kw)

    await pg_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            new_facts=[
                fact("Prefiere cajas de madera", category="preference", timestamp=old),  # 0.9 → 0.06
                fact("Requiere ISO 9001", category="requirement", timestamp=old),  # 365 days: 0.9 → 0.24
                fact("Nunca sugerir envíos aéreos", category="rejection", timestamp=old),  # never decays
                fact("Viaja a una feria en Milán", category="routine", expires_at=now - timedelta(minutes=5)),
                fact("Prefiere fresado en 5 ejes", category="preference"),
            ],
        )
    )
    before = await pg_memory.get_memory_context("s", user_id)
    assert sorted(f.content for f in before.long_term.facts) == [
        "Nunca sugerir envíos aéreos",
        "Prefiere fresado en 5 ejes",
        "Requiere ISO 9001",
    ]

    async with await MemoryAdmin.connect(database_url) as admin:
        report = await admin.archive_decayed(DecayPolicy())
    assert report.decayed >= 1
    assert report.expired >= 1

    archived = {r.content for r in await pg_memory.list_memory(user_id) if r.archived_at is not None}
    assert archived == {"Prefiere cajas de madera", "Viaja a una feria en Milán"}
    after = await pg_memory.get_memory_context("s", user_id)
    assert after.long_term.facts == before.long_term.facts  # the reads already hid them

    # Stated again, an archived fact is current again (reinforced, clock reset).
    await pg_memory.update_memory(
        MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere cajas de madera", category="preference")])
    )
    assert "Prefiere cajas de madera" in {
        f.content for f in (await pg_memory.get_memory_context("s", user_id)).long_term.facts
    }


def test_cli_maintain_archives_through_the_service_path(admin_conn: AdminConn, database_url: str) -> None:
    user = uuid4()
    stale = MemorizedFact(
        content="Prefiere palés europeos",
        category="preference",
        confidence=0.7,
        source="inferred",
        timestamp=datetime.now(UTC) - timedelta(days=800),
    )
    payload = json.dumps([i.as_json() for i in items_from_update([stale], None, None, [], None)])
    admin_conn.execute("select public.memory_upsert_items(%s, %s::jsonb)", (user, payload))

    result = CliRunner().invoke(app, ["maintain"], env={"MEMORY_DATABASE_URL": database_url, "COLUMNS": "200"})

    assert result.exit_code == 0, result.output
    assert "decayed and" in result.output
    row = admin_conn.execute("select archived_at from public.user_memory where user_id = %s", (user,)).fetchone()
    assert row is not None
    assert row[0] is not None


# --- end to end with an LLM extractor ----------------------------------------------------------------------------


class Extractor:
    """A FunctionModel body answering each extraction with the next scripted list of facts."""

    def __init__(self, *answers: list[dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.prompts.append(
            "\n".join(
                p.content
                for m in messages
                if isinstance(m, ModelRequest)
                for p in m.parts
                if isinstance(p, UserPromptPart) and isinstance(p.content, str)
            )
        )
        return ModelResponse(
            parts=[ToolCallPart(tool_name=info.output_tools[0].name, args={"facts": self.answers.pop(0)})]
        )


def said(content: str, category: str, **kw: Any) -> dict[str, Any]:
    return {"content": content, "category": category, "confidence": 0.9, "source": "explicit", **kw}


async def chat(memory: MemoryManager, session: str, user: UUID, text: str, at: datetime) -> list[MemorizedFact]:
    await memory.add_message(session, Message(role="user", content=text, timestamp=at), user_id=user)
    return await memory.remember_from_session(session, user)


async def test_extracted_contradictions_paraphrases_and_rejections_end_to_end(
    pg_settings: MemorySettings, user_id: UUID
) -> None:
    script = Extractor(
        [said("Presupuesto máximo de 1000 EUR por pedido", "constraint"), said("Prefiere aluminio 7075", "preference")],
        [said("Prefiere el aluminio 7075", "preference")],  # a paraphrase: reinforces
        [said("El presupuesto ahora es de 2000 EUR", "constraint"), said("Ya no usa aluminio 7075", "preference")],
        [said("No sugerir titanio", "rejection", importance=1)],
    )
    now = datetime.now(UTC)
    march, may = now - timedelta(days=240), now - timedelta(days=1)
    settings = with_shop_vocabulary(pg_settings)
    async with MemoryManager.open(settings, extractor=LLMExtractor(FunctionModel(script))) as memory:
        await chat(memory, "s1", user_id, "Mi presupuesto máximo es 1000 EUR y prefiero el 7075", march)
        await chat(memory, "s2", user_id, "Sigo prefiriendo el aluminio 7075", march + timedelta(days=3))
        await chat(memory, "s3", user_id, "Ahora el presupuesto es 2000 EUR; ya no uso 7075", may)
        await chat(memory, "s4", user_id, "Y no me sugieras titanio", may)

        ctx = await memory.get_memory_context("s5", user_id)
        ranked, rejection = ctx.long_term.facts[:-1], ctx.long_term.facts[-1]
        assert sorted(f.content for f in ranked) == ["El presupuesto ahora es de 2000 EUR", "Ya no usa aluminio 7075"]
        assert rejection.content == "No sugerir titanio"
        assert "Never suggest (the user rejected these):\n- No sugerir titanio" in memory.format_memory_for_agent(ctx)
        in_march = [f.content for f in await memory.fact_history(user_id, at=march + timedelta(days=30))]
        assert sorted(in_march) == ["Prefiere aluminio 7075", "Presupuesto máximo de 1000 EUR por pedido"]
        assert len(await memory.fact_history(user_id)) == 5  # 2 superseded, 3 current, none duplicated
        stats = memory.stats
        assert (stats.facts_inserted, stats.facts_reinforced, stats.facts_near_duplicates) == (5, 1, 1)
        assert stats.facts_superseded == 2
        assert stats.extraction_model_calls == 4
