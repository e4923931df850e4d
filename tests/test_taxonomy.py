"""The ten fact categories: documented once, accepted by every backend, labelled in the prompt."""

from __future__ import annotations

from typing import get_args
from uuid import UUID

import pytest

from memory_plugin import MemorizedFact, MemoryManager, MemoryUpdate
from memory_plugin.models import FactCategory
from memory_plugin.taxonomy import FACT_CATEGORIES, TAXONOMY, default_importance


def test_every_category_is_documented_with_an_importance() -> None:
    assert set(TAXONOMY) == set(get_args(FactCategory)) == set(FACT_CATEGORIES)
    for name, spec in TAXONOMY.items():
        assert spec.name == name
        assert 1 <= spec.default_importance <= 5
        assert spec.description
        assert spec.store
        assert spec.do_not_store
    # What the user turned down must never be forgotten; trivia ranks low.
    assert default_importance("rejection") == 5
    assert default_importance("fact") < default_importance("requirement")


@pytest.mark.parametrize("category", FACT_CATEGORIES)
async def test_every_backend_stores_and_shows_every_category(
    any_memory: MemoryManager, user_id: UUID, category: FactCategory
) -> None:
    content = f"Ejemplo de {category}: entregas solo por la mañana"
    fact = MemorizedFact(content=content, category=category, confidence=0.9, source="explicit")
    [stored] = await any_memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact]))
    assert (stored.category, stored.content) == (category, content)
    context = await any_memory.get_memory_context("s-taxonomy", user_id)
    block = any_memory.format_memory_for_agent(context)
    assert content in block
