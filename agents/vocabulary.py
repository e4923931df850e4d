"""The machining shop's vocabulary: alloy grades, materials and finishes, for memory and for the agents.

`SHOP_VOCABULARY` is the memory library's generic vocabulary (weekdays, months, colours; budget and lead
time slots) plus what a CNC shop's customers talk about:

- named values: finishes ("pulido", "mate", "satinado") and materials ("aluminio", "acero", "titanio"…), so
  "Prefiere aluminio" never merges with "Prefiere acero" however alike the rest;
- the slot `material:<code or name>` (preference, rejection): a verb of using or preferring ("prefiere",
  "usa", "trabaja con", "evita", "sugieras", "prefers", "uses", "avoid", "suggest"…) and exactly one material:
  "Prefiere aluminio 7075" → `material:7075`, "Ya no usa 7075" → `material:7075`, "Never suggest titanium" →
  `material:titanium`. Two materials ("prefiere 7075 a 6061") or a requirement mentioning one ("certificado
  de material del 7075") are no slot.

The shop's demo and workflow open their manager with it: `MemorySettings(vocabulary=SHOP_VOCABULARY)`, or
`with_shop_vocabulary(settings)` for settings read from the environment. The grade lists here are also what
the offline entity rules recognise (`agents/intent/entities.py`).
"""

from __future__ import annotations

import re

from memory_plugin.quality.vocabulary import DEFAULT_VOCABULARY, ValueSlot, named_values
from memory_plugin.settings import MemorySettings

__all__ = [
    "ALUMINIUM_GRADES",
    "MATERIAL_NAMES",
    "MATERIAL_SLOT",
    "SHOP_VOCABULARY",
    "STAINLESS_GRADES",
    "STEEL_GRADES",
    "with_shop_vocabulary",
]

ALUMINIUM_GRADES = r"(?:1050|2011|2017|2024|5052|5083|5754|6060|6061|6063|6082|7020|7075)"
"""Aluminium grades the shop machines (a regex alternation, on folded text)."""
STAINLESS_GRADES = r"(?:304l?|316l?|303|310|410|420|430|17-?4\s?ph)"
"""Stainless steel grades."""
STEEL_GRADES = r"(?:1045|4140|c45e?|f-?114|f-?1140|f-?125|42crmo4|s235(?:jr)?|s275(?:jr)?|s355(?:jr)?|ck45)"
"""Carbon and alloy steel grades."""

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

MATERIAL_SLOT = ValueSlot(
    prefix="material",
    categories=frozenset({"preference", "rejection"}),
    verb=re.compile(
        r"\b(prefier\w*|prefer\w*|usa|usar|usan|utiliza\w*|trabaja con|emplea\w*|gusta|evita\w*|sugier\w*|sugerir"
        r"|suggest\w*|recommend\w*|recomiend\w*|use|uses|using|used|like|likes|avoid\w*|works with|work with)\b"
    ),
    names=MATERIAL_NAMES,
    # Aluminium alloys (1xxx–7xxx), stainless steels (303, 304, 316, 316L…), carbon steels (S235, C45, F-114):
    # wider than the grade lists above, since a stored stance on any grade must find its later restatement.
    codes=re.compile(r"\b([1-7]\d{3}|3[01]\d l?|3[01]\dl|4[0-4]\d|s[23]\d\d\w*|c\d\d|f ?\d{3,4})\b"),
    implies={"stainless steel": "steel"},  # "acero inoxidable" names one material
)
"""`material:<code or name>`: the stance on one material (see the module docstring)."""

_SHOP_VALUES = named_values(
    {
        # finishes
        "polished": "pulido pulida polished", "matte": "mate matte matt",
        "gloss": "brillante brillo gloss glossy", "satin": "satinado satinada satin",
        # materials
        "aluminium": "aluminio aluminium aluminum", "steel": "acero steel", "stainless": "inoxidable stainless",
        "titanium": "titanio titanium", "brass": "laton brass", "copper": "cobre copper",
        "bronze": "bronce bronze", "plastic": "plastico plastica plastic", "nylon": "nylon nailon",
        "wood": "madera wood",
    }
)  # fmt: skip

SHOP_VOCABULARY = DEFAULT_VOCABULARY.extended(values=_SHOP_VALUES, slots=(MATERIAL_SLOT,))
"""The generic vocabulary plus the shop's finishes, materials and the `material:` slot."""


def with_shop_vocabulary(settings: MemorySettings) -> MemorySettings:
    """`settings` with the shop's vocabulary (everything else as it was, e.g. read from the environment)."""
    return settings.model_copy(update={"vocabulary": SHOP_VOCABULARY})
