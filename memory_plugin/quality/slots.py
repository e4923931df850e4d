"""Slot-like facts: facts about a subject that has one current value per user.

A budget has one current limit, a delivery lead time one current value, and (in a shop's vocabulary) the
user's stance on one material (prefers it, no longer uses it, never suggest it) one current state. When a new
current fact has the same slot as a stored current fact, the stored one is **superseded**: it gets
`invalid_at` and `superseded_by` (the new fact) and stays in the table as history ("what was the budget in
March?"); only the new one reaches the prompt. Everything else accumulates (a user has many requirements).

Detection is deliberately small and conservative: a slot is assigned only when the text says clearly what
it is about, and a fact without a slot is never superseded by this rule (the extractor can still say
`replaces`). Which slots exist is configuration (`vocabulary.Vocabulary.slots`); the default vocabulary has:

- `budget` (constraint, requirement, preference, goal, fact): "presupuesto"/"budget"/"spend" and an amount
  (a number): "Presupuesto máximo 1000€", "Budget is now 2000 EUR". Without a number it is no slot ("Pide
  presupuestos de fresado" asks for quotes).
- `lead_time` (constraint, requirement, preference): "plazo"/"lead time"/"deadline"/"entrega en…"/"delivery
  within…" and a number.

A domain adds value slots (`vocabulary.ValueSlot`), e.g. the machining shop's `material:<code or name>`:
"Prefiere aluminio 7075" → `material:7075`, "Never suggest titanium" → `material:titanium`.

The slot is computed here, once, when an item is built (`MemoryItem.slot`), and stored in
`user_memory.slot`; the SQL only compares it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..rows import MemoryItem
from ..text import normalize_key
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = ["detect_slot", "keep_latest_per_slot"]


def detect_slot(content: str, category: str, vocabulary: Vocabulary = DEFAULT_VOCABULARY) -> str | None:
    """The slot of a fact (`budget`, `lead_time`, or one of the vocabulary's), or None when it has none."""
    return vocabulary.slot_of(normalize_key(content), category)


def keep_latest_per_slot(items: Sequence[MemoryItem]) -> tuple[list[MemoryItem], int]:
    """Within one write, keep only the last fact of each slot (a batch that says "budget 1000" then "budget
    2000" means 2000); returns the items left and how many were dropped. Items without a slot all stay."""
    last: dict[str, int] = {}
    for index, item in enumerate(items):
        if item.kind == "fact" and item.slot is not None:
            last[item.slot] = index
    kept = [
        item
        for index, item in enumerate(items)
        if not (item.kind == "fact" and item.slot is not None and last[item.slot] != index)
    ]
    return kept, len(items) - len(kept)
