"""Slot-like facts: facts about a subject that has one current value per user.

A budget has one current limit, a delivery lead time one current value, and the user's stance on one material
(prefers it, no longer uses it, never suggest it) one current state. When a new current fact has the same
slot as a stored current fact, the stored one is **superseded**: it gets `invalid_at` and `superseded_by`
(the new fact) and stays in the table as history ("what was the budget in March?"); only the new one
reaches the prompt. Everything else accumulates (a user has many requirements).

Detection is deliberately small and conservative: a slot is assigned only when the text says clearly what
it is about, in Spanish or English, and a fact without a slot is never superseded by this rule (the
extractor can still say `replaces`). The slots:

- `budget` (constraint, requirement, preference, goal, fact): "presupuesto"/"budget"/"spend" and an amount
  (a number): "Presupuesto máximo 1000€", "Budget is now 2000 EUR". Without a number it is no slot ("Pide
  presupuestos de fresado" asks for quotes).
- `lead_time` (constraint, requirement, preference): "plazo"/"lead time"/"deadline"/"entrega en…"/"delivery
  within…" and a number.
- `material:<code or name>` (preference, rejection): a verb of using or preferring ("prefiere", "usa",
  "trabaja con", "evita", "sugieras", "prefers", "uses", "avoid", "suggest"…) and exactly one material:
  "Prefiere aluminio 7075" → `material:7075`, "Ya no usa 7075" → `material:7075`, "Never suggest titanium" →
  `material:titanium`. Two materials ("prefiere 7075 a 6061") or a requirement mentioning one ("certificado
  de material del 7075") are no slot.

The slot is computed here, once, when an item is built (`MemoryItem.slot`), and stored in
`user_memory.slot`; the SQL only compares it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..rows import MemoryItem
from ..text import normalize_key

__all__ = ["MATERIAL_NAMES", "detect_slot", "keep_latest_per_slot"]

_BUDGET = re.compile(r"\b(presupuesto|budget|gasto maximo|gastar|spend|spending)\b")
_LEAD_TIME = re.compile(
    r"\b(plazo|plazos|lead time|deadline|entrega en|entregas en|delivery within|delivered within|turnaround)\b"
)
_NUMBER = re.compile(r"\d")
_MATERIAL_VERB = re.compile(
    r"\b(prefier\w*|prefer\w*|usa|usar|usan|utiliza\w*|trabaja con|emplea\w*|gusta|evita\w*|sugier\w*|sugerir"
    r"|suggest\w*|recommend\w*|recomiend\w*|use|uses|using|used|like|likes|avoid\w*|works with|work with)\b"
)
# Aluminium alloys (1xxx–7xxx), stainless steels (303, 304, 316, 316L…), carbon steels (S235, C45, F-114).
_ALLOY_CODE = re.compile(r"\b([1-7]\d{3}|3[01]\d l?|3[01]\dl|4[0-4]\d|s[23]\d\d\w*|c\d\d|f ?\d{3,4})\b")
MATERIAL_NAMES: dict[str, str] = {
    "aluminio": "aluminium", "aluminium": "aluminium", "aluminum": "aluminium",
    "titanio": "titanium", "titanium": "titanium",
    "laton": "brass", "brass": "brass", "bronce": "bronze", "bronze": "bronze",
    "cobre": "copper", "copper": "copper",
    "acero": "steel", "steel": "steel", "inox": "stainless steel", "inoxidable": "stainless steel",
    "stainless": "stainless steel",
    "peek": "peek", "pom": "pom", "delrin": "pom", "nylon": "nylon", "poliamida": "nylon", "ptfe": "ptfe",
    "teflon": "ptfe", "abs": "abs", "policarbonato": "polycarbonate", "polycarbonate": "polycarbonate",
    "magnesio": "magnesium", "magnesium": "magnesium", "inconel": "inconel",
}  # fmt: skip
"""Material words (Spanish and English, without accents) and their canonical name in a slot."""
_MATERIAL_WORD = re.compile(r"\b(" + "|".join(sorted(MATERIAL_NAMES, key=len, reverse=True)) + r")\b")

_BUDGET_CATEGORIES = frozenset({"constraint", "requirement", "preference", "goal", "fact"})
_LEAD_TIME_CATEGORIES = frozenset({"constraint", "requirement", "preference"})
_MATERIAL_CATEGORIES = frozenset({"preference", "rejection"})


def _material(text: str) -> str | None:
    """The one material the text is about (an alloy code wins over the family name), or None."""
    codes = {m.group(1).replace(" ", "") for m in _ALLOY_CODE.finditer(text)}
    if len(codes) == 1:
        return codes.pop()
    if codes:
        return None  # "prefiere 7075 a 6061": two materials, no single slot
    names = {MATERIAL_NAMES[m.group(1)] for m in _MATERIAL_WORD.finditer(text)}
    # "acero inoxidable" names one material: stainless steel wins over plain steel.
    if names == {"steel", "stainless steel"}:
        names = {"stainless steel"}
    return names.pop() if len(names) == 1 else None


def detect_slot(content: str, category: str) -> str | None:
    """The slot of a fact (`budget`, `lead_time`, `material:<x>`), or None when it has none."""
    text = normalize_key(content)
    if category in _BUDGET_CATEGORIES and _BUDGET.search(text) and _NUMBER.search(text):
        return "budget"
    if category in _LEAD_TIME_CATEGORIES and _LEAD_TIME.search(text) and _NUMBER.search(text):
        return "lead_time"
    if category in _MATERIAL_CATEGORIES and _MATERIAL_VERB.search(text):
        material = _material(text)
        if material is not None:
            return f"material:{material}"
    return None


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
