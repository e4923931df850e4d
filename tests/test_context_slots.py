"""Structured slots: confirmed facts patch single fields, never the whole document; on RAM and on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
import pytest_asyncio
from psycopg_pool import AsyncConnectionPool

from memory_plugin.context.slots import (
    SlotPatch,
    Slots,
    patch_from_facts,
    preferences_from_slots,
    render_slots,
    slots_from_facts,
)
from memory_plugin.context.store import (
    ContextStore,
    InMemoryContextStore,
    PostgresContextStore,
    apply_facts_to_slots,
)
from memory_plugin.context.tokens import token_counter
from memory_plugin.models import MemorizedFact, UserPreferences


def fact(content: str, category: str = "preference", source: str = "explicit", **extra: Any) -> MemorizedFact:
    return MemorizedFact(content=content, category=category, confidence=0.9, source=source, **extra)  # type: ignore[arg-type]


@pytest_asyncio.fixture(loop_scope="session", params=["memory", "postgres"])
async def context_store(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[ContextStore]:
    if request.param == "memory":
        yield InMemoryContextStore()
        return
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, min_size=1, max_size=4, open=False)
    await pool.open(wait=True)
    try:
        yield PostgresContextStore(pool)
    finally:
        await pool.close()


def test_only_confirmed_facts_fill_slots_each_in_its_field() -> None:
    facts = [
        fact("Prefiere aluminio 7075"),
        fact("No sugerir acero inoxidable", "rejection"),
        fact("Presupuesto máximo 2000 €", "constraint"),
        fact("Quiere entregas los lunes", "routine"),
        fact("Parece preferir latón", source="inferred"),
        fact("Trabaja con Ana", "contact"),
    ]
    slots = slots_from_facts(facts)
    assert [e.text for e in slots.get("preferences")] == ["Prefiere aluminio 7075"]
    assert [e.text for e in slots.get("rejections")] == ["No sugerir acero inoxidable"]
    assert [e.text for e in slots.get("constraints")] == ["Presupuesto máximo 2000 €"]
    assert [e.text for e in slots.get("schedule")] == ["Quiere entregas los lunes"]
    assert slots.get("goal") == []
    # Provenance per entry: the fact and its messages.
    assert slots.get("preferences")[0].fact_id == facts[0].id


def test_a_superseded_fact_leaves_its_slot_and_only_changed_fields_are_patched() -> None:
    old = fact("Prefiere aluminio 7075", source_message_ids=("m1",))
    slots = slots_from_facts([old, fact("No sugerir acero", "rejection")])
    new = fact("Prefiere titanio", replaces=old.id)
    patch = patch_from_facts(slots, [new], superseded=[old.id])
    assert set(patch.new) == {"preferences"}  # rejections untouched: not in the patch at all
    after = patch.apply(slots)
    assert [e.text for e in after.get("preferences")] == ["Prefiere titanio"]
    assert [e.text for e in after.get("rejections")] == ["No sugerir acero"]


def test_a_restated_fact_moves_to_the_front_instead_of_repeating() -> None:
    a, b = fact("Prefiere aluminio 7075"), fact("Prefiere acabado anodizado")
    slots = slots_from_facts([a, b])
    again = patch_from_facts(slots, [fact("prefiere  ALUMINIO 7075")]).apply(slots)
    assert [e.text.casefold() for e in again.get("preferences")] == [
        "prefiere aluminio 7075",
        "prefiere acabado anodizado",
    ]


def test_user_preferences_are_a_view_of_the_profile_slot() -> None:
    prefs = UserPreferences(
        preferred_materials=["aluminio 7075", "latón"], industry="aeroespacial", communication_style="technical"
    )
    slots = slots_from_facts([], preferences=prefs)
    assert preferences_from_slots(slots) == prefs
    assert preferences_from_slots(Slots()).is_empty()


def test_rendering_keeps_within_its_budget_cutting_the_last_fields_first() -> None:
    counter = token_counter("openai:gpt-4o")
    facts = [fact("No sugerir acero inoxidable", "rejection")]
    facts += [fact(f"Prefiere el acabado número {i} con tratamiento térmico especial") for i in range(8)]
    slots = slots_from_facts(facts)
    full = render_slots(slots, counter, max_tokens=1000)
    short = render_slots(slots, counter, max_tokens=40)
    assert "número 7" in full
    assert "número 0" in full
    assert counter.count(short) <= 40
    assert "acero inoxidable" in short  # rejections come before preferences
    assert render_slots(Slots(), counter, max_tokens=100) == ""


def test_round_trip_of_the_stored_document() -> None:
    slots = slots_from_facts([fact("Prefiere aluminio 7075", source_message_ids=("m1", "m2"))])
    assert Slots.from_json(slots.to_json()) == slots
    assert Slots.from_json({"goal": None, "unknown": [{"text": "x"}]}) == Slots()


async def test_patches_apply_field_by_field_and_a_stale_patch_is_refused(context_store: ContextStore) -> None:
    user = uuid4()
    slots = await apply_facts_to_slots(context_store, user, [fact("Prefiere aluminio 7075")])
    assert [e.text for e in (await context_store.read_slots(user)).get("preferences")] == ["Prefiere aluminio 7075"]
    # A patch computed from the empty document is stale now: refused, nothing overwritten.
    stale = patch_from_facts(Slots(), [fact("Prefiere latón")])
    assert not await context_store.patch_slots(user, stale)
    assert (await context_store.read_slots(user)) == slots
    # Clearing a field removes it.
    clear = SlotPatch(expected={"preferences": slots.get("preferences")}, new={"preferences": []})
    assert await context_store.patch_slots(user, clear)
    assert (await context_store.read_slots(user)).is_empty()


async def test_concurrent_patches_to_different_fields_both_survive(context_store: ContextStore) -> None:
    user = uuid4()
    await apply_facts_to_slots(context_store, user, [fact("Objetivo: bajar costes un 10 %", "goal")])
    # Both computed from the same read, as two workers would.
    base = await context_store.read_slots(user)
    pref = patch_from_facts(base, [fact("Prefiere aluminio 7075")])
    rej = patch_from_facts(base, [fact("No sugerir acero", "rejection")])
    results = await asyncio.gather(context_store.patch_slots(user, pref), context_store.patch_slots(user, rej))
    assert results == [True, True]
    after = await context_store.read_slots(user)
    assert [e.text for e in after.get("preferences")] == ["Prefiere aluminio 7075"]
    assert [e.text for e in after.get("rejections")] == ["No sugerir acero"]
    assert [e.text for e in after.get("goal")] == ["Objetivo: bajar costes un 10 %"]


async def test_concurrent_writers_on_the_same_field_both_land_through_retries(context_store: ContextStore) -> None:
    user = uuid4()
    facts = [fact(f"Prefiere material {i}") for i in range(4)]
    await asyncio.gather(*(apply_facts_to_slots(context_store, user, [f]) for f in facts))
    texts = {e.text for e in (await context_store.read_slots(user)).get("preferences")}
    assert texts == {f.content for f in facts}


async def test_postgres_rows_are_under_rls(database_url: str) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
    await pool.open(wait=True)
    try:
        store = PostgresContextStore(pool)
        a, b = uuid4(), uuid4()
        await apply_facts_to_slots(store, a, [fact("Prefiere aluminio 7075")])
        assert (await store.read_slots(b)).is_empty()
        # B cannot patch A's row: a patch "as B" writes B's own row only.
        await store.patch_slots(b, patch_from_facts(Slots(), [fact("Prefiere latón")]))
        assert [e.text for e in (await store.read_slots(a)).get("preferences")] == ["Prefiere aluminio 7075"]
    finally:
        await pool.close()
    with psycopg.connect(database_url) as conn:
        owners = {
            r[0] for r in conn.execute("select user_id from public.memory_slots where user_id in (%s, %s)", (a, b))
        }
    assert owners == {a, b}


async def test_erasing_a_user_erases_their_slots_and_summaries(database_url: str) -> None:
    from memory_plugin.database.admin import MemoryAdmin

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
    await pool.open(wait=True)
    try:
        store = PostgresContextStore(pool)
        user, other = uuid4(), uuid4()
        for uid in (user, other):
            await apply_facts_to_slots(store, uid, [fact("Prefiere aluminio 7075")])
            await store.add_summary(uid, "user", "Pidió bridas", kind="model", language="es", message_count=2)
        admin = await MemoryAdmin.connect(database_url)
        try:
            assert await admin.erase_user(user) >= 2
        finally:
            await admin.close()
        assert (await store.read_slots(user)).is_empty()
        assert await store.summary_versions(user, "user") == []
        assert not (await store.read_slots(other)).is_empty()
    finally:
        await pool.close()


def test_preferences_merge_into_the_profile_instead_of_replacing_it() -> None:
    slots = slots_from_facts([], preferences=UserPreferences(preferred_materials=["latón"], location="Bilbao"))
    patch = patch_from_facts(
        slots, preferences=UserPreferences(preferred_materials=["aluminio 7075"], industry="naval")
    )
    view = preferences_from_slots(patch.apply(slots))
    assert view == UserPreferences(preferred_materials=["aluminio 7075", "latón"], location="Bilbao", industry="naval")
    # A resync from facts keeps the profile.
    rebuilt = slots_from_facts([fact("Prefiere titanio")], keep=patch.apply(slots))
    assert preferences_from_slots(rebuilt) == view


async def test_profile_entries_without_a_fact_patch_again(context_store: ContextStore) -> None:
    user = uuid4()
    await apply_facts_to_slots(context_store, user, preferences=UserPreferences(location="Bilbao"))
    await apply_facts_to_slots(context_store, user, preferences=UserPreferences(industry="naval"))
    view = preferences_from_slots(await context_store.read_slots(user))
    assert view == UserPreferences(location="Bilbao", industry="naval")
