"""The words the memory rules know about a domain: named values and slots, as configuration.

Two write rules depend on what the users talk about:

- the near-duplicate **guard** (`matching.match_guard`) keeps apart facts that name different values of a
  closed set ("los lunes" / "los viernes", "aluminio" / "acero"): embeddings rate such pairs above 0.9, so
  the words naming a value are mapped to one name per value (`Vocabulary.values`) and the value is part of
  the guard;
- **slots** (`slots.detect_slot`): subjects with one current value per user (a budget, a lead time), where
  a new fact supersedes the stored one (`Vocabulary.slots`, checked in order, the first that applies wins).

`DEFAULT_VOCABULARY` holds what any domain needs, in Spanish and English: weekdays, months and colours as
named values, and the `budget` and `lead_time` slots. A domain adds its own with `Vocabulary.extended`
(the machining shop's alloys, materials and finishes live with its agents, `agents/vocabulary.py`) and
hands it to the manager as `MemorySettings(vocabulary=...)`.

The keys computed with a vocabulary are stored (`user_memory.slot`, `user_memory.match_guard`) and SQL
only compares them: changing the vocabulary changes the keys of facts written from then on, while stored
rows keep theirs until the fact is stated again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

__all__ = [
    "BUDGET_SLOT",
    "DEFAULT_VOCABULARY",
    "LEAD_TIME_SLOT",
    "SlotRule",
    "SubjectSlot",
    "ValueSlot",
    "Vocabulary",
    "named_values",
]


class SlotRule(Protocol):
    """One kind of slot: given a fact's normalised content (`text.normalize_key`) and category, its slot."""

    def detect(self, text: str, category: str) -> str | None:
        """The slot the fact fills, or None when this rule does not apply."""
        ...


_NUMBER = re.compile(r"\d")


@dataclass(frozen=True, slots=True, eq=False)
class SubjectSlot:
    """A subject with one current value, recognised by its words: "Presupuesto máximo 1000€" → `budget`."""

    name: str
    """The slot stored for every fact about the subject."""
    categories: frozenset[str]
    """Fact categories that can state the subject's value (a `requirement` can state a budget)."""
    subject: re.Pattern[str]
    """Words naming the subject, matched on normalised text (lower case, no accents)."""
    needs_number: bool = True
    """Only a fact holding a number states a value: "Pide presupuestos de fresado" asks for quotes."""

    def detect(self, text: str, category: str) -> str | None:
        """`name` when the fact is about the subject, else None."""
        if category not in self.categories or not self.subject.search(text):
            return None
        if self.needs_number and not _NUMBER.search(text):
            return None
        return self.name


@dataclass(frozen=True, slots=True, eq=False)
class ValueSlot:
    """The user's stance on one value of a kind, `<prefix>:<value>`: "Prefiere aluminio 7075" and "Ya no usa
    7075" both fill `material:7075`. Applies only when a verb of stance appears and exactly one value is named:
    "prefiere 7075 a 6061" names two, so it fills no slot."""

    prefix: str
    """The kind of value ("material")."""
    categories: frozenset[str]
    """Fact categories that state a stance (preference, rejection)."""
    verb: re.Pattern[str]
    """Verbs of using, preferring or avoiding, matched on normalised text."""
    names: Mapping[str, str]
    """Words naming a value (normalised) and the value's canonical name: "aluminio" → "aluminium"."""
    codes: re.Pattern[str] | None = None
    """Codes of a value (group 1; spaces dropped), more precise than a name, so a code wins: "aluminio
    7075" → `7075`."""
    implies: Mapping[str, str] = field(default_factory=dict)
    """A more specific value and the general one it contains ("stainless steel" → "steel"): "acero
    inoxidable" names stainless steel, not two values."""
    _name_word: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Longest words first, so "acero inoxidable"-like multi-word names win over their first word.
        words = "|".join(re.escape(w) for w in sorted(self.names, key=len, reverse=True))
        object.__setattr__(self, "_name_word", re.compile(rf"\b({words})\b" if words else r"(?!)"))

    def value(self, text: str) -> str | None:
        """The one value the text names (a code wins over a name), or None for none or several."""
        if self.codes is not None:
            codes = {m.group(1).replace(" ", "") for m in self.codes.finditer(text)}
            if len(codes) == 1:
                return codes.pop()
            if codes:
                return None
        names = {self.names[m.group(1)] for m in self._name_word.finditer(text)}
        names -= {self.implies[n] for n in names if n in self.implies}
        return names.pop() if len(names) == 1 else None

    def detect(self, text: str, category: str) -> str | None:
        """`<prefix>:<value>` when the fact states a stance on exactly one value, else None."""
        if category not in self.categories or not self.verb.search(text):
            return None
        value = self.value(text)
        return None if value is None else f"{self.prefix}:{value}"


def named_values(table: Mapping[str, str]) -> dict[str, str]:
    """`{value: "word word …"}` → `{word: value}`: `named_values({"mon": "lunes monday"})` maps both words to
    `mon`. Words are written normalised (lower case, no accents)."""
    return {word: value for value, words in table.items() for word in words.split()}


@dataclass(frozen=True, slots=True, eq=False)
class Vocabulary:
    """Named values and slots of a domain (see the module docstring). Immutable; extend with `extended`."""

    values: Mapping[str, str] = field(default_factory=dict)
    """Word (normalised) → the value it names; a plural ending in "s" finds its singular."""
    slots: tuple[SlotRule, ...] = ()
    """Slot rules, checked in order; the first that gives a slot wins."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))

    def value_of(self, word: str) -> str | None:
        """The value a normalised word names ("mondays", "aceros": plurals too), or None."""
        value = self.values.get(word)
        if value is None and word.endswith("s"):
            value = self.values.get(word[:-1])
        return value

    def slot_of(self, text: str, category: str) -> str | None:
        """The slot of a fact's normalised content, by the first rule that gives one."""
        for rule in self.slots:
            slot = rule.detect(text, category)
            if slot is not None:
                return slot
        return None

    def extended(self, *, values: Mapping[str, str] | None = None, slots: tuple[SlotRule, ...] = ()) -> Vocabulary:
        """This vocabulary plus more named values (a word already known takes the new value) and more slot
        rules (checked after the existing ones)."""
        return Vocabulary(values={**self.values, **(values or {})}, slots=(*self.slots, *slots))


_GENERIC_VALUES = named_values(
    {
        # days of the week
        "mon": "lunes monday", "tue": "martes tuesday", "wed": "miercoles wednesday", "thu": "jueves thursday",
        "fri": "viernes friday", "sat": "sabado saturday", "sun": "domingo sunday",
        # months
        "jan": "enero january", "feb": "febrero february", "mar": "marzo march", "apr": "abril april",
        "may": "mayo",  # not English "may" (a verb far more often than a month)
        "jun": "junio june", "jul": "julio july", "aug": "agosto august",
        "sep": "septiembre setiembre september", "oct": "octubre october", "nov": "noviembre november",
        "dec": "diciembre december",
        # colours
        "black": "negro negra negros negras black", "white": "blanco blanca blancos blancas white",
        "red": "rojo roja rojos rojas red", "blue": "azul azules blue", "green": "verde verdes green",
        "grey": "gris grises gray grey", "yellow": "amarillo amarilla yellow",
        "gold": "dorado dorada oro gold golden", "silver": "plateado plateada plata silver",
    }
)  # fmt: skip

_LIMIT_CATEGORIES = frozenset({"constraint", "requirement", "preference"})

BUDGET_SLOT = SubjectSlot(
    "budget",
    _LIMIT_CATEGORIES | {"goal", "fact"},
    re.compile(r"\b(presupuesto|budget|gasto maximo|gastar|spend|spending)\b"),
)
"""`budget`: "presupuesto"/"budget"/"spend" and an amount ("Presupuesto máximo 1000€", "Budget is now 2000 EUR")."""

LEAD_TIME_SLOT = SubjectSlot(
    "lead_time",
    _LIMIT_CATEGORIES,
    re.compile(
        r"\b(plazo|plazos|lead time|deadline|entrega en|entregas en|delivery within|delivered within|turnaround)\b"
    ),
)
"""`lead_time`: "plazo"/"lead time"/"deadline"/"entrega en…"/"delivery within…" and a number."""

DEFAULT_VOCABULARY = Vocabulary(values=_GENERIC_VALUES, slots=(BUDGET_SLOT, LEAD_TIME_SLOT))
"""What any domain needs: weekdays, months and colours (Spanish and English); the `budget` and `lead_time`
slots."""
