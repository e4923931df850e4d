"""The dashboard shows stored identifiers (categories, preference and slot fields, kinds, score and token parts)
by human names in English and Spanish: every name the schema and the code can store has both."""

from __future__ import annotations

from typing import get_args

import pytest

from memory_plugin.context.slots import SLOT_FIELDS
from memory_plugin.dashboard.labels import LABELS, label
from memory_plugin.retrieval.scored import ScoreComponents
from memory_plugin.rows import SINGLE_PREFERENCE_SLOTS, MemoryKind
from memory_plugin.taxonomy import FACT_CATEGORIES


@pytest.mark.parametrize(
    ("group", "names"),
    [
        ("category", (*FACT_CATEGORIES, "preferred_materials", *SINGLE_PREFERENCE_SLOTS, *get_args(MemoryKind))),
        ("slot_field", SLOT_FIELDS),
        ("score_part", tuple(ScoreComponents.__dataclass_fields__)),
        ("token_part", ("profile", "slots", "summary", "facts", "rejections", "frame", "messages", "prompt", "total")),
        ("summary_kind", ("model", "extractive")),
    ],
)
def test_every_stored_name_has_an_english_and_a_spanish_label(group: str, names: tuple[str, ...]) -> None:
    assert [n for n in names if n not in LABELS[group]] == []
    for name in names:
        english, spanish = label("en", group, name), label("es", group, name)
        assert english
        assert spanish
        assert "_" not in english
        assert "_" not in spanish


def test_labels_read_as_words() -> None:
    assert label("en", "category", "health_note") == "Health note"
    assert label("es", "category", "health_note") == "Nota de salud"
    assert label("es", "category", "preferred_materials") == "Materiales preferidos"
    assert label("es", "fact_slot", "material:7075") == "material 7075"
    assert label("en", "fact_slot", "lead_time") == "lead time"
    assert label("es", "slot_field", "reminder_pref") == "Recordatorios"
    assert label("en", "category", "a_vocabulary_own") == "a vocabulary own"
