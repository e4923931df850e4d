"""The long-term store contract, run against both backends (`any_memory`: real Postgres and the in-memory
store). Whatever a user can observe through `MemoryManager` must be the same on both."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from memory_plugin import (
    MemorizedFact,
    MemoryManager,
    MemoryUpdate,
    ProjectRecord,
    UserPreferences,
)
from memory_plugin.quality import WriteOutcome
from memory_plugin.quality.rules import WriteRules
from memory_plugin.ranking import RankingWeights, fact_score
from memory_plugin.write.items import items_from_update


def fact(content: str, *, confidence: float = 0.8, category: str = "preference", **kw: Any) -> MemorizedFact:
    return MemorizedFact(content=content, category=category, confidence=confidence, source="explicit", **kw)  # type: ignore[arg-type]


async def remember(memory: MemoryManager, user_id: UUID, *facts: MemorizedFact, **kw: Any) -> list[MemorizedFact]:
    return await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=list(facts), **kw))


async def stored_facts(memory: MemoryManager, user_id: UUID) -> list[Any]:
    return [r for r in await memory.list_memory(user_id) if r.kind == "fact"]


async def test_context_ranks_facts_by_the_documented_score(any_memory: MemoryManager, user_id: UUID) -> None:
    now = datetime.now(UTC)
    facts = [
        fact("Tolerancia mínima ±0,01 mm en ejes", importance=5, confidence=0.7, category="constraint"),
        fact("Prefiere acabado anodizado negro", importance=3, confidence=1.0),
        fact("Necesita certificado de material", importance=3, confidence=0.8, category="requirement"),
        # Same importance and confidence as the previous fact but last stated 20 days ago: less recent, lower.
        fact("Pide entregas los lunes", importance=3, confidence=0.8, timestamp=now - timedelta(days=20)),
        fact("Presupuesto máximo de 5.000 EUR", importance=4, confidence=0.65, category="constraint"),
        fact("Le gustó el último pedido", importance=1, confidence=0.95, category="feedback"),
    ]
    await remember(any_memory, user_id, *facts)

    ctx = await any_memory.get_memory_context("s-rank", user_id)
    got = [f.content for f in ctx.long_term.facts]
    weights = RankingWeights()
    expected = sorted(
        facts,
        key=lambda f: (
            -fact_score(
                importance=f.importance,
                confidence=f.confidence,
                last_reinforced_at=f.timestamp,
                now=now,
                weights=weights,
            )
        ),
    )
    assert got == [f.content for f in expected]
    assert got == [
        "Tolerancia mínima ±0,01 mm en ejes",  # 0.6 + 0.21 + 0.1
        "Presupuesto máximo de 5.000 EUR",  # 0.48 + 0.195 + 0.1
        "Prefiere acabado anodizado negro",  # 0.36 + 0.3 + 0.1
        "Necesita certificado de material",  # 0.36 + 0.24 + 0.1
        "Pide entregas los lunes",  # 0.36 + 0.24 + 0.033
        "Le gustó el último pedido",  # 0.12 + 0.285 + 0.1
    ]
    assert all(f.user_id == user_id for f in ctx.long_term.facts)
    assert ctx.long_term_available


async def test_context_holds_at_most_max_facts_the_best_ones(any_memory: MemoryManager, user_id: UUID) -> None:
    limit = any_memory.settings.max_facts_in_context
    facts = [fact(f"Hecho número {i}", importance=1 + i % 5, confidence=0.6 + (i % 4) / 10) for i in range(limit + 8)]
    await remember(any_memory, user_id, *facts)
    ctx = await any_memory.get_memory_context("s", user_id)
    assert len(ctx.long_term.facts) == limit
    assert len(await stored_facts(any_memory, user_id)) == limit + 8

    def score(f: MemorizedFact) -> float:  # all were just stated, so recency is the same for every fact
        return 0.6 * f.importance / 5 + 0.3 * f.confidence

    kept = {f.content for f in ctx.long_term.facts}
    assert (
        min(score(f) for f in facts if f.content in kept)
        >= max(score(f) for f in facts if f.content not in kept) - 1e-6
    )


async def test_repeated_fact_reinforces_instead_of_duplicating(any_memory: MemoryManager, user_id: UUID) -> None:
    step = any_memory.settings.reinforcement_step
    first = fact("Prefiere aluminio 7075", confidence=0.7, importance=2, source_message_ids=("m1",))
    [stored] = await remember(any_memory, user_id, first)
    assert stored.relevance_count == 0
    assert stored.last_reinforced_at is None

    variants = ["  PREFIERE   alumínio 7075. ", "prefiere Aluminio 7075", "Prefiere ALUMINIO 7075!"]
    for n, text in enumerate(variants, start=1):
        [again] = await remember(
            any_memory,
            user_id,
            fact(text, confidence=0.65, importance=4 if n == 1 else 1, source_message_ids=(f"m{n + 1}", "m1")),
        )
        assert again.id == stored.id
        assert again.relevance_count == n
        assert again.confidence == pytest.approx(min(1.0, 0.7 + n * step), abs=1e-4)

    [row] = await stored_facts(any_memory, user_id)
    assert row.id == stored.id
    assert row.content == "Prefiere aluminio 7075"  # the first wording stays
    assert row.relevance_count == 3
    assert row.confidence == pytest.approx(1.0, abs=1e-4)
    assert row.importance == 4  # the max ever stated, not the last
    assert row.source_message_ids == ("m1", "m2", "m3", "m4")  # accumulated once each, in order

    [capped] = await remember(any_memory, user_id, fact("prefiere aluminio 7075", confidence=0.9))
    assert capped.confidence == pytest.approx(1.0, abs=1e-4)  # bounded
    assert capped.relevance_count == 4
    assert capped.last_reinforced_at is not None

    ctx = await any_memory.get_memory_context("s", user_id)
    assert [(f.content, f.relevance_count) for f in ctx.long_term.facts] == [("Prefiere aluminio 7075", 4)]


async def test_same_text_in_another_category_is_another_fact(any_memory: MemoryManager, user_id: UUID) -> None:
    await remember(any_memory, user_id, fact("Entrega en 2 semanas", category="requirement"))
    await remember(any_memory, user_id, fact("Entrega en 2 semanas", category="constraint"))
    assert sorted(r.category for r in await stored_facts(any_memory, user_id)) == ["constraint", "requirement"]


async def test_duplicate_facts_in_one_batch_fold_into_one_row(any_memory: MemoryManager, user_id: UUID) -> None:
    out = await remember(
        any_memory,
        user_id,
        fact(
            "Necesita tolerancia de 0,05 mm",
            confidence=0.7,
            importance=2,
            category="requirement",
            source_message_ids=("a",),
        ),
        fact(
            "necesita TOLERANCIA de 0,05 mm.",
            confidence=0.9,
            importance=5,
            category="requirement",
            source_message_ids=("b",),
        ),
        fact("Trabaja en el sector aeroespacial", confidence=0.8),
    )
    assert len(out) == 2
    rows = await stored_facts(any_memory, user_id)
    assert len(rows) == 2
    [tol] = [r for r in rows if "tolerancia" in r.content.lower()]
    assert tol.content == "Necesita tolerancia de 0,05 mm"
    assert tol.confidence == pytest.approx(0.9, abs=1e-4)  # the stronger one, not reinforced by itself
    assert tol.importance == 5
    assert tol.relevance_count == 0
    assert tol.source_message_ids == ("a", "b")


async def test_single_valued_preferences_are_replaced_materials_accumulate(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    await any_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            preferences=UserPreferences(
                preferred_materials=["aluminio 7075"],
                industry="aeroespacial",
                location="Bilbao",
                communication_style="technical",
                typical_quantities="prototipos",
            ),
        )
    )
    await any_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            preferences=UserPreferences(
                preferred_materials=["acero inoxidable 316"],
                industry="automoción",
                location="Valencia",
                communication_style="simple",
                typical_quantities="producción media",
            ),
        )
    )
    await any_memory.update_memory(
        MemoryUpdate(user_id=user_id, preferences=UserPreferences(preferred_materials=["Aluminio 7075", "latón"]))
    )

    prefs = (await any_memory.get_memory_context("s", user_id)).long_term.preferences
    assert prefs.industry == "automoción"
    assert prefs.location == "Valencia"
    assert prefs.communication_style == "simple"
    assert prefs.typical_quantities == "producción media"
    assert sorted(prefs.preferred_materials) == ["acero inoxidable 316", "aluminio 7075", "latón"]
    assert prefs.preferred_materials[-1] == "acero inoxidable 316"  # the only one not stated in the last update

    rows = [r for r in await any_memory.list_memory(user_id) if r.kind == "preference"]
    by_slot: dict[str, list[Any]] = {}
    for r in rows:
        by_slot.setdefault(r.category, []).append(r)
    assert {slot: len(v) for slot, v in by_slot.items()} == {
        "preferred_materials": 3,
        "industry": 1,
        "location": 1,
        "communication_style": 1,
        "typical_quantities": 1,
    }
    [alu] = [r for r in by_slot["preferred_materials"] if r.content == "aluminio 7075"]
    assert alu.relevance_count == 1  # restated with different case: reinforced, not duplicated
    assert by_slot["industry"][0].relevance_count == 0  # a new value starts over


async def test_projects_are_history_newest_first_limited(any_memory: MemoryManager, user_id: UUID) -> None:
    base = datetime.now(UTC) - timedelta(days=10)
    for i in range(5):
        await any_memory.update_memory(
            MemoryUpdate(
                user_id=user_id,
                session_id=f"s{i}",
                project=ProjectRecord(
                    description=f"{(i + 1) * 10} soportes en aluminio 7075",
                    materials=("aluminio 7075",),
                    quantity=str((i + 1) * 10),
                    status="quoted" if i % 2 else "requested",
                    timestamp=base + timedelta(days=i),
                ),
            )
        )
    # The same description again is a new project, not a repeat.
    await any_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            project=ProjectRecord(description="10 soportes en aluminio 7075", timestamp=base + timedelta(days=6)),
        )
    )

    projects = (await any_memory.get_memory_context("s", user_id)).long_term.projects
    limit = any_memory.settings.max_projects_in_context
    assert limit == 3
    assert [p.description for p in projects] == [
        "10 soportes en aluminio 7075",
        "50 soportes en aluminio 7075",
        "40 soportes en aluminio 7075",
    ]
    assert projects[1].materials == ("aluminio 7075",)
    assert projects[1].quantity == "50"
    assert projects[1].status == "requested"
    assert projects[2].status == "quoted"
    assert projects[1].session_id == "s4"
    assert len([r for r in await any_memory.list_memory(user_id) if r.kind == "project"]) == 6


async def test_patterns_count_occurrences_most_frequent_first(any_memory: MemoryManager, user_id: UUID) -> None:
    for text in (
        "Pide presupuestos de fresado CNC",
        "pide presupuestos de FRESADO cnc.",
        "Pide presupuestos de fresado CNC",
    ):
        await any_memory.update_memory(MemoryUpdate(user_id=user_id, patterns=[text]))
    await any_memory.update_memory(MemoryUpdate(user_id=user_id, patterns=["Pregunta plazos de entrega"]))
    for _ in range(2):
        await any_memory.update_memory(MemoryUpdate(user_id=user_id, patterns=["Adjunta planos en PDF"]))

    patterns = (await any_memory.get_memory_context("s", user_id)).long_term.patterns
    assert [(p.description, p.occurrences) for p in patterns] == [
        ("Pide presupuestos de fresado CNC", 3),
        ("Adjunta planos en PDF", 2),
        ("Pregunta plazos de entrega", 1),
    ]


async def test_another_users_memory_never_appears(any_memory: MemoryManager) -> None:
    alice, bob = uuid4(), uuid4()
    await remember(any_memory, alice, fact("Alice prefiere titanio"), patterns=["Alice pide tornillos"])
    await remember(
        any_memory,
        bob,
        fact("Bob prefiere titanio"),
        fact("Alice prefiere titanio"),  # the same text for another user is another user's row
        preferences=UserPreferences(industry="naval"),
        project=ProjectRecord(description="Proyecto de Bob"),
        patterns=["Bob pide tuercas"],
    )

    ctx = await any_memory.get_memory_context("s", alice)
    assert [f.content for f in ctx.long_term.facts] == ["Alice prefiere titanio"]
    assert all(f.user_id == alice for f in ctx.long_term.facts)
    assert ctx.long_term.preferences.is_empty()
    assert ctx.long_term.projects == []
    assert [p.description for p in ctx.long_term.patterns] == ["Alice pide tornillos"]
    assert {r.user_id for r in await any_memory.list_memory(alice)} == {alice}
    assert [r.content for r in await any_memory.search_text(alice, "titanio")] == ["Alice prefiere titanio"]
    [alice_row] = [r for r in await any_memory.list_memory(alice) if r.kind == "fact"]
    [bob_copy] = [r for r in await any_memory.list_memory(bob) if r.content == "Alice prefiere titanio"]
    assert alice_row.id != bob_copy.id
    assert bob_copy.relevance_count == 0  # Bob's write did not reinforce Alice's row (nor vice versa)
    assert alice_row.relevance_count == 0


async def test_forget_deletes_only_the_callers_item(any_memory: MemoryManager) -> None:
    alice, bob = uuid4(), uuid4()
    [a1, a2] = await remember(any_memory, alice, fact("Alice uno"), fact("Alice dos"))
    [b1] = await remember(any_memory, bob, fact("Bob uno"))

    assert await any_memory.forget(alice, b1.id) is False  # Bob's item, asked for by Alice
    assert [r.id for r in await any_memory.list_memory(bob)] == [b1.id]
    assert await any_memory.forget(alice, uuid4()) is False

    assert await any_memory.forget(alice, str(a1.id)) is True
    assert [r.id for r in await any_memory.list_memory(alice)] == [a2.id]
    assert await any_memory.forget(alice, a1.id) is False  # already gone
    ctx = await any_memory.get_memory_context("s", alice)
    assert [f.content for f in ctx.long_term.facts] == ["Alice dos"]

    # A forgotten fact stated again is stored anew, from scratch.
    [again] = await remember(any_memory, alice, fact("alice uno"))
    assert again.id != a1.id
    assert again.relevance_count == 0


async def test_search_text_ignores_case_and_treats_wildcards_literally(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    await remember(
        any_memory,
        user_id,
        fact("Prefiere Aluminio 7075 anodizado", importance=2),
        fact("Acepta un 100% de inspección", importance=4, category="requirement"),
        fact("Pide 1000 piezas al mes", importance=3, category="requirement"),
        fact("Usa la referencia AB_12", importance=2, category="requirement"),
        fact("Usa la referencia ABX12", importance=2, category="requirement"),
    )
    assert [r.content for r in await any_memory.search_text(user_id, "ALUMINIO")] == [
        "Prefiere Aluminio 7075 anodizado"
    ]
    assert [r.content for r in await any_memory.search_text(user_id, "  anodizado  ")] == [
        "Prefiere Aluminio 7075 anodizado"
    ]
    assert [r.content for r in await any_memory.search_text(user_id, "100%")] == ["Acepta un 100% de inspección"]
    assert [r.content for r in await any_memory.search_text(user_id, "ab_12")] == ["Usa la referencia AB_12"]
    assert await any_memory.search_text(user_id, "titanio") == []
    hits = await any_memory.search_text(user_id, "a", limit=2)
    assert [r.content for r in hits] == ["Acepta un 100% de inspección", "Pide 1000 piezas al mes"]


async def test_user_without_memory_gets_an_empty_long_term(any_memory: MemoryManager, user_id: UUID) -> None:
    ctx = await any_memory.get_memory_context("s", user_id)
    assert ctx.long_term.is_empty()
    assert ctx.long_term_available
    assert await any_memory.list_memory(user_id) == []
    assert await any_memory.update_memory(MemoryUpdate(user_id=user_id)) == []


# --- memory quality (memory_plugin/quality/): the same rules on every backend ----------------------------------------


async def detailed(memory: MemoryManager, user_id: UUID, *facts: MemorizedFact) -> WriteOutcome:
    return await memory.update_memory_detailed(MemoryUpdate(user_id=user_id, new_facts=list(facts)))


async def current_facts(memory: MemoryManager, user_id: UUID) -> list[str]:
    return [f.content for f in (await memory.get_memory_context("s-quality", user_id)).long_term.facts]


@pytest.mark.parametrize(
    ("first", "paraphrase", "category"),
    [
        ("Prefiere aluminio 7075", "Prefiere el aluminio 7075", "preference"),
        ("Necesita certificado de material", "Necesita certificados de material.", "requirement"),
        ("Trabaja en el sector aeroespacial", "Trabaja para el sector aeroespacial", "fact"),
        ("Prefers anodized black finish", "Prefers a black anodized finish", "preference"),
        ("Wants deliveries on Mondays", "Wants deliveries on Monday", "routine"),
    ],
)
async def test_a_paraphrase_reinforces_the_stored_fact_instead_of_adding_a_row(
    any_memory: MemoryManager, user_id: UUID, first: str, paraphrase: str, category: str
) -> None:
    [stored] = await remember(any_memory, user_id, fact(first, category=category, confidence=0.7, importance=2))
    outcome = await detailed(
        any_memory,
        user_id,
        fact(paraphrase, category=category, confidence=0.8, importance=4, source_message_ids=("m2",)),
    )
    assert (outcome.inserted, outcome.reinforced, outcome.near_duplicates) == (0, 1, 1)
    [row] = await stored_facts(any_memory, user_id)
    assert row.id == stored.id
    assert row.content == first  # the first wording stays
    assert row.relevance_count == 1
    assert row.confidence == pytest.approx(0.8 + any_memory.settings.reinforcement_step, abs=1e-4)
    assert row.importance == 4
    assert "m2" in row.source_message_ids
    assert any_memory.stats.facts_near_duplicates == 1


@pytest.mark.parametrize(
    ("first", "other"),
    [
        ("Prefiere aluminio 7075", "Prefiere aluminio 6061"),  # trigram similarity 0.64, but another alloy
        ("Prefiere tornillos M8 en acero", "Prefiere tornillos M6 en acero"),  # part codes differ
        ("Presupuesto máximo de 1.000 EUR por pedido", "Presupuesto máximo de 1.500 EUR por pedido"),
        ("Prefiere acabado anodizado negro", "Prefiere acabado anodizado rojo"),
        ("Prefers anodized black finish", "Prefers anodized red finish"),  # 0.73, the closest non-paraphrase
        ("Pide entregas los lunes", "Pide entregas los martes"),
        ("Acepta envíos urgentes", "No acepta envíos urgentes"),  # 0.89, but one is negated
        ("Accepts partial deliveries", "Doesn't accept partial deliveries"),
    ],
)
async def test_clearly_different_facts_are_not_merged(
    any_memory: MemoryManager, user_id: UUID, first: str, other: str
) -> None:
    await remember(any_memory, user_id, fact(first, category="requirement"))
    outcome = await detailed(any_memory, user_id, fact(other, category="requirement"))
    assert (outcome.inserted, outcome.near_duplicates) == (1, 0)
    assert sorted(r.content for r in await stored_facts(any_memory, user_id)) == sorted([first, other])


async def test_near_duplicates_in_one_write_fold_into_one_row(any_memory: MemoryManager, user_id: UUID) -> None:
    outcome = await detailed(
        any_memory,
        user_id,
        fact("Prefiere acabado anodizado negro", confidence=0.7, source_message_ids=("a",)),
        fact("Prefiere un acabado anodizado en negro", confidence=0.9, importance=5, source_message_ids=("b",)),
        fact("Prefiere acabado anodizado rojo", source_message_ids=("c",)),
    )
    assert (outcome.inserted, outcome.near_duplicates) == (2, 1)
    rows = {r.content: r for r in await stored_facts(any_memory, user_id)}
    assert set(rows) == {"Prefiere acabado anodizado negro", "Prefiere acabado anodizado rojo"}
    black = rows["Prefiere acabado anodizado negro"]
    assert (black.confidence, black.importance, black.source_message_ids) == (pytest.approx(0.9), 5, ("a", "b"))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Presupuesto máximo de 1000 EUR por pedido", "El presupuesto ahora es de 2000 EUR"),
        ("Budget limited to 1000€ per order", "Budget is now 2000€"),
    ],
)
async def test_a_new_budget_supersedes_the_old_one_and_history_keeps_it(
    any_memory: MemoryManager, user_id: UUID, old: str, new: str
) -> None:
    now = datetime.now(UTC)
    march, november = now - timedelta(days=200), now - timedelta(days=2)
    [first] = await remember(any_memory, user_id, fact(old, category="constraint", timestamp=march))
    outcome = await detailed(any_memory, user_id, fact(new, category="constraint", timestamp=november))

    [second] = outcome.stored
    [gone] = outcome.superseded
    assert gone.id == first.id
    assert gone.superseded_by == second.id
    assert gone.invalid_at == november  # when the new value was stated
    assert await current_facts(any_memory, user_id) == [new]  # only the current value reaches the prompt
    assert len(await stored_facts(any_memory, user_id)) == 2  # nothing destroyed
    # "What was the budget in the spring?"
    assert [f.content for f in await any_memory.fact_history(user_id, at=march + timedelta(days=30))] == [old]
    assert [f.content for f in await any_memory.fact_history(user_id, at=now)] == [new]
    assert [f.content for f in await any_memory.fact_history(user_id)] == [new, old]
    assert [f.content for f in await any_memory.fact_history(user_id, include_invalid=False)] == [new]
    assert [f.content for f in await any_memory.fact_history(user_id, at=march - timedelta(days=1))] == []


async def test_restating_an_old_value_later_keeps_both_periods_in_the_history(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    now = datetime.now(UTC)
    t1, t2, t3 = now - timedelta(days=90), now - timedelta(days=60), now - timedelta(days=1)
    await remember(any_memory, user_id, fact("Presupuesto máximo 1000 EUR", category="constraint", timestamp=t1))
    await remember(any_memory, user_id, fact("Presupuesto máximo 2000 EUR", category="constraint", timestamp=t2))
    await remember(any_memory, user_id, fact("Presupuesto máximo 1000 EUR", category="constraint", timestamp=t3))

    assert await current_facts(any_memory, user_id) == ["Presupuesto máximo 1000 EUR"]
    rows = await stored_facts(any_memory, user_id)
    assert len(rows) == 3
    for at, expected in ((t1, "1000"), (t2, "2000"), (t3, "1000"), (t2 + timedelta(days=30), "2000")):
        [held] = await any_memory.fact_history(user_id, at=at + timedelta(hours=1))
        assert expected in held.content, at


@pytest.mark.parametrize(
    ("old", "new", "category"),
    [
        ("Prefiere aluminio 7075", "Ya no usa aluminio 7075", "preference"),
        ("Prefers 7075 aluminium for prototypes", "No longer uses 7075", "preference"),
        ("Prefiere titanio para las piezas", "No me sugieras titanio", "rejection"),
    ],
)
async def test_a_new_stance_on_a_material_supersedes_the_old_one(
    any_shop_memory: MemoryManager, user_id: UUID, old: str, new: str, category: str
) -> None:
    memory = any_shop_memory  # materials are the shop's vocabulary
    [first, _] = await remember(memory, user_id, fact(old), fact("Prefiere aluminio 6061 para series"))
    outcome = await detailed(memory, user_id, fact(new, category=category))
    assert [f.id for f in outcome.superseded] == [first.id]
    assert sorted(await current_facts(memory, user_id)) == sorted([new, "Prefiere aluminio 6061 para series"])


async def test_replaces_supersedes_the_named_fact_of_the_same_user_only(any_memory: MemoryManager) -> None:
    alice, bob = uuid4(), uuid4()
    [old] = await remember(any_memory, alice, fact("Trabaja con el proveedor Acme", category="contact"))
    [bobs] = await remember(any_memory, bob, fact("Trabaja con el proveedor Acme", category="contact"))

    # Bob's write naming Alice's fact changes nothing of Alice's.
    outcome = await detailed(any_memory, bob, fact("Trabaja con Zeta", category="contact", replaces=old.id))
    assert outcome.superseded == []
    assert await current_facts(any_memory, alice) == ["Trabaja con el proveedor Acme"]

    outcome = await detailed(any_memory, alice, fact("Trabaja con Zeta", category="contact", replaces=old.id))
    [gone] = outcome.superseded
    assert (gone.id, gone.superseded_by) == (old.id, outcome.stored[0].id)
    assert await current_facts(any_memory, alice) == ["Trabaja con Zeta"]
    assert bobs.id in {r.id for r in await stored_facts(any_memory, bob)}


async def test_two_facts_of_one_write_replacing_one_fact_the_last_said_replaces_it(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    [old] = await remember(any_memory, user_id, fact("Su contacto de compras es Marta", category="contact"))
    outcome = await detailed(
        any_memory,
        user_id,
        fact("Su contacto de compras es Luis", category="contact", replaces=old.id),
        fact("Su contacto de compras es Ana", category="contact", replaces=old.id),
    )
    [gone] = outcome.superseded
    last = next(f for f in outcome.stored if f.content == "Su contacto de compras es Ana")
    assert (gone.id, gone.superseded_by) == (old.id, last.id)


async def test_rejections_always_reach_the_prompt(any_memory: MemoryManager, user_id: UUID) -> None:
    now = datetime.now(UTC)
    strong = [fact(f"Requisito importante número {i}", importance=5, confidence=1.0) for i in range(15)]
    await remember(
        any_memory,
        user_id,
        *strong,
        fact("No sugerir titanio", category="rejection", importance=1, confidence=0.6),
        fact("Never suggest air freight", category="rejection", importance=1, timestamp=now - timedelta(days=900)),
    )
    ctx = await any_memory.get_memory_context("s", user_id)
    facts = ctx.long_term.facts
    assert len(facts) == any_memory.settings.max_facts_in_context + 2
    assert [f.content for f in facts[-2:]] == ["No sugerir titanio", "Never suggest air freight"]
    assert facts[-1].confidence == pytest.approx(0.8)  # rejections do not decay
    block = any_memory.format_memory_for_agent(ctx)
    never = block.split("Never suggest (the user rejected these):")[1]
    assert "- No sugerir titanio" in never
    assert "- Never suggest air freight" in never


async def test_decay_lowers_stale_facts_and_hides_them_below_the_floor(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    now = datetime.now(UTC)
    await remember(
        any_memory,
        user_id,
        # Without decay the first ranks higher (0.78 vs 0.675); after 200 days it has decayed to 0.46.
        fact("Prefiere acabado pulido espejo", importance=4, confidence=1.0, timestamp=now - timedelta(days=200)),
        fact("Prefiere entregas por la mañana", importance=4, confidence=0.65, timestamp=now - timedelta(days=40)),
        # 0.8 after 600 days of a 180-day half-life: 0.08, below the 0.2 floor.
        fact("Prefiere embalaje en cartón", importance=5, confidence=0.8, timestamp=now - timedelta(days=600)),
    )
    facts = (await any_memory.get_memory_context("s", user_id)).long_term.facts
    assert [f.content for f in facts] == ["Prefiere entregas por la mañana", "Prefiere acabado pulido espejo"]
    assert facts[1].confidence == pytest.approx(2 ** (-200 / 180), abs=1e-3)  # shown decayed
    assert len(await stored_facts(any_memory, user_id)) == 3  # hidden, not deleted

    # Stated again: reinforced, the clock starts over.
    await remember(any_memory, user_id, fact("Prefiere embalaje en cartón", importance=5, confidence=0.8))
    facts = (await any_memory.get_memory_context("s", user_id)).long_term.facts
    assert facts[0].content == "Prefiere embalaje en cartón"
    assert facts[0].confidence == pytest.approx(0.9, abs=1e-3)


async def test_expired_facts_never_reach_the_prompt(any_memory: MemoryManager, user_id: UUID) -> None:
    now = datetime.now(UTC)
    [trip, _past] = await remember(
        any_memory,
        user_id,
        fact("Viaja a Bilbao por una feria", category="routine", expires_at=now + timedelta(days=2)),
        fact(
            "Está de vacaciones con el equipo",
            category="routine",
            timestamp=now - timedelta(days=3),
            expires_at=now - timedelta(hours=1),
        ),
    )
    assert trip.expires_at == now + timedelta(days=2)
    assert await current_facts(any_memory, user_id) == ["Viaja a Bilbao por una feria"]
    assert len(await stored_facts(any_memory, user_id)) == 2
    # It held before it expired.
    assert [f.content for f in await any_memory.fact_history(user_id, at=now - timedelta(hours=2))] == [
        "Está de vacaciones con el equipo"
    ]


async def test_a_replayed_write_returns_the_same_rows_and_reinforces_once(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    await remember(any_memory, user_id, fact("Prefiere aluminio 7075", confidence=0.7))
    items = items_from_update([fact("Prefiere el aluminio 7075", confidence=0.7)], None, None, [], None)
    write_id = uuid4()
    first = await any_memory.store.upsert(user_id, items, WriteRules(reinforcement_step=0.1), write_id=write_id)
    again = await any_memory.store.upsert(user_id, items, WriteRules(reinforcement_step=0.1), write_id=write_id)
    assert [r.id for r in first] == [r.id for r in again]
    assert [r.relevance_count for r in again] == [1]
    assert [r.content for r in again] == ["Prefiere aluminio 7075"]


async def test_a_write_id_another_user_used_first_never_swallows_a_write(any_memory: MemoryManager) -> None:
    """Write ids are chosen by clients: each user's are their own."""
    alice, bob, write_id = uuid4(), uuid4(), uuid4()
    for user, text in ((alice, "Prefiere titanio"), (bob, "Prefiere acero")):
        items = items_from_update([fact(text)], None, None, [], None)
        written = await any_memory.store.upsert(user, items, WriteRules(reinforcement_step=0.1), write_id=write_id)
        assert [r.content for r in written] == [text]
    assert await current_facts(any_memory, bob) == ["Prefiere acero"]


async def test_in_one_write_the_last_value_of_a_slot_wins(any_memory: MemoryManager, user_id: UUID) -> None:
    outcome = await detailed(
        any_memory,
        user_id,
        fact("Presupuesto máximo 1000 EUR", category="constraint"),
        fact("Prefiere aluminio 7075"),
        fact("Mejor dicho, presupuesto máximo 1500 EUR", category="constraint"),
    )
    assert sorted(f.content for f in outcome.stored) == [
        "Mejor dicho, presupuesto máximo 1500 EUR",
        "Prefiere aluminio 7075",
    ]
    assert sorted(await current_facts(any_memory, user_id)) == [
        "Mejor dicho, presupuesto máximo 1500 EUR",
        "Prefiere aluminio 7075",
    ]


async def test_a_fact_naming_the_one_it_replaces_is_never_merged_into_it(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    [old] = await remember(any_memory, user_id, fact("Prefiere acabado anodizado negro"))
    outcome = await detailed(any_memory, user_id, fact("Prefiere un acabado anodizado en negro mate", replaces=old.id))
    assert (outcome.inserted, outcome.near_duplicates) == (1, 0)
    assert [f.id for f in outcome.superseded] == [old.id]
    assert await current_facts(any_memory, user_id) == ["Prefiere un acabado anodizado en negro mate"]


async def test_a_swapped_word_is_another_fact_even_in_a_long_sentence(any_memory: MemoryManager, user_id: UUID) -> None:
    await remember(any_memory, user_id, fact("Recibe entregas solo los viernes por la mañana", category="routine"))
    outcome = await detailed(
        any_memory, user_id, fact("Recibe entregas solo los lunes por la mañana", category="routine")
    )
    assert (outcome.inserted, outcome.near_duplicates) == (1, 0)
