"""`UserPreferences` is a view of the same stored rows as the profile the slots show: they cannot disagree."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import uuid4

import pytest_asyncio

from memory_plugin import MemoryManager
from memory_plugin.context.builder import ContextBuilder
from memory_plugin.context.slots import preferences_from_slots
from memory_plugin.context.store import apply_facts_to_slots
from memory_plugin.models import MemorizedFact, MemoryUpdate, UserPreferences
from memory_plugin.settings import MemorySettings


@pytest_asyncio.fixture(loop_scope="session")
async def builder(pg_memory: MemoryManager, pg_settings: MemorySettings) -> AsyncIterator[ContextBuilder]:
    built = await ContextBuilder.open(pg_memory, pg_settings, database_url=pg_memory.database_url)
    try:
        yield built
    finally:
        await built.close()


def preference(content: str, **extra: object) -> MemorizedFact:
    return MemorizedFact.model_validate(
        {"content": content, "category": "preference", "confidence": 0.9, "source": "explicit", **extra}
    )


async def test_a_changed_preference_is_the_same_in_the_slots_and_in_user_preferences(
    pg_memory: MemoryManager, builder: ContextBuilder
) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    first = await pg_memory.update_memory_detailed(
        MemoryUpdate(
            user_id=user,
            preferences=UserPreferences(industry="aeroespacial", preferred_materials=["aluminio 7075"]),
            new_facts=[preference("Prefiere aluminio 7075")],
        )
    )
    await builder.after_turn(session, user, [], stored=first.stored, superseded=first.superseded)
    # The user changes their mind: a new industry, and a preference fact that replaces the old one.
    changed = await pg_memory.update_memory_detailed(
        MemoryUpdate(
            user_id=user,
            preferences=UserPreferences(industry="naval"),
            new_facts=[preference("Prefiere titanio grado 5", replaces=first.stored[0].id)],
        )
    )
    await builder.after_turn(session, user, [], stored=changed.stored, superseded=changed.superseded)

    slots = await builder.slots(user)
    context = await pg_memory.get_memory_context(session, user)
    assert context.long_term.preferences.industry == "naval"
    assert preferences_from_slots(slots) == context.long_term.preferences
    assert [e.text for e in slots.get("preferences")] == ["Prefiere titanio grado 5"]
    assert [f.content for f in context.long_term.facts] == ["Prefiere titanio grado 5"]
    built = await builder.build(session, user, query="¿Plazo para 10 piezas?")
    assert "naval" in built.instructions
    assert "aeroespacial" not in built.instructions
    assert "aluminio 7075" in built.instructions  # still a preferred material: the list only grows
    assert "Prefiere aluminio 7075" not in built.instructions


async def test_the_slots_profile_cannot_diverge_from_the_stored_preferences(
    pg_memory: MemoryManager, builder: ContextBuilder
) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    await pg_memory.update_memory(MemoryUpdate(user_id=user, preferences=UserPreferences(location="Bilbao")))
    # A preference written without any slot update (no after_turn) is in the profile at once.
    assert preferences_from_slots(await builder.slots(user)) == UserPreferences(location="Bilbao")
    # A profile stored in the slot document (as an older version did) is not a second copy: it is ignored.
    await apply_facts_to_slots(builder.store, user, preferences=UserPreferences(location="Sevilla"))
    view = preferences_from_slots(await builder.slots(user))
    assert view == (await pg_memory.get_memory_context(session, user)).long_term.preferences
    assert view.location == "Bilbao"
    built = await builder.build(session, user)
    assert "Bilbao" in built.instructions
    assert "Sevilla" not in built.instructions
