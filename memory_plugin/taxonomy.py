"""The fact taxonomy: ten categories, each with what to store and a default importance.

What the user likes, needs, cannot exceed and thinks of past work (`preference`, `requirement`, `constraint`,
`feedback`); what not to suggest again (`rejection`, the key to not repeating what the user turned down); and
`goal`, `routine`, `contact`, `health_note` (non-clinical only) and `fact`. Importance is a 1–5 ranking
weight.

This module is the one place the categories are described: the LLM extractor's instructions are rendered
from it (`render_taxonomy_for_prompt`), the rule-based extractor and the memory tools take default
importances from it (`default_importance`), and the README table mirrors it. The SQL check constraint on
`user_memory.category` allows exactly these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import get_args

from .models import FactCategory

__all__ = [
    "FACT_CATEGORIES",
    "TAXONOMY",
    "CategorySpec",
    "default_importance",
    "render_taxonomy_for_prompt",
]

FACT_CATEGORIES: tuple[FactCategory, ...] = get_args(FactCategory)
"""The ten category names, in the order of the `FactCategory` literal."""


@dataclass(frozen=True, slots=True)
class CategorySpec:
    """One category of long-term fact: what it means and what an extractor may store under it."""

    name: FactCategory
    """The value stored in `user_memory.category`."""
    description: str
    """What a fact of this category says about the user, in one sentence."""
    default_importance: int
    """1 (trivia) to 5 (must never be forgotten): used when the extractor gives none."""
    store: tuple[str, ...]
    """Examples of what to store (third person, as stored)."""
    do_not_store: tuple[str, ...]
    """What must not be stored under this category."""


_SPECS: tuple[CategorySpec, ...] = (
    CategorySpec(
        name="preference",
        description="What the user likes or usually chooses: materials, processes, finishes, suppliers, how to be"
        " answered.",
        default_importance=3,
        store=("Prefiere aluminio 7075 para prototipos", "Prefers answers in plain language"),
        do_not_store=("the material of today's request only, unless the user says it always applies",),
    ),
    CategorySpec(
        name="requirement",
        description="What the user's parts or orders must meet: tolerances, certifications, standards, documents.",
        default_importance=4,
        store=("Requiere certificación ISO 9001 en todas las piezas", "Needs a tolerance of ±0.01 mm on shafts"),
        do_not_store=("the quantity or drawing of the request being discussed now",),
    ),
    CategorySpec(
        name="constraint",
        description="A limit the user cannot exceed: budget per order or per part, deadlines, batch sizes.",
        default_importance=4,
        store=("No puede superar 1500 € por pedido", "Budget is capped at $2,000 per order"),
        do_not_store=("a price the assistant quoted; only limits the user stated",),
    ),
    CategorySpec(
        name="feedback",
        description="The user's judgement of past work: late deliveries, quality problems, praise.",
        default_importance=3,
        store=("Opinión: la última entrega llegó tarde", "Feedback: the last batch had burrs"),
        do_not_store=("complaints about this conversation itself",),
    ),
    CategorySpec(
        name="rejection",
        description="Something the user turned down and does not want suggested again.",
        default_importance=5,
        store=("No quiere que le sugieran acero 1045", "Do not suggest powder coating"),
        do_not_store=("a one-off 'not this time' that the user says may change",),
    ),
    CategorySpec(
        name="goal",
        description="What the user is working towards: a certification, moving to production, lowering unit cost.",
        default_importance=3,
        store=("Objetivo: pasar a producción en serie en 2027", "Goal: get AS9100 certified"),
        do_not_store=("the goal of today's request only",),
    ),
    CategorySpec(
        name="routine",
        description="A recurring habit: when they order, when they can receive deliveries, review cycles.",
        default_importance=3,
        store=("Hace pedidos a principios de cada mes", "Receives deliveries only on weekday mornings"),
        do_not_store=("a single event (that is a fact, possibly temporary)",),
    ),
    CategorySpec(
        name="contact",
        description="Who to deal with and how: a role and a name, the preferred channel.",
        default_importance=3,
        store=("Su responsable de compras es Marta", "Prefers to be contacted by email"),
        do_not_store=("phone numbers, home addresses, ids or any personal data beyond a name and a role",),
    ),
    CategorySpec(
        name="health_note",
        description="A non-clinical note about health that changes how to serve the user, e.g. what it affects.",
        default_importance=2,
        store=("Tiene una condición médica que afecta a los turnos", "Has a medical condition that affects travel"),
        do_not_store=("diagnoses, medication names or doses, test results: never clinical details",),
    ),
    CategorySpec(
        name="fact",
        description="Any other fact worth remembering beyond this conversation: sector, machines, location, size;"
        " or a temporary situation with its dates (then give expires_at).",
        default_importance=2,
        store=("Trabaja en el sector aeroespacial", "Will be away the weekend of 2026-11-28 (temporary)"),
        do_not_store=("greetings, small talk, and anything true only during this conversation",),
    ),
)

TAXONOMY: Mapping[FactCategory, CategorySpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
"""Every category's spec, by name, in the order of `FactCategory`."""


def default_importance(category: FactCategory) -> int:
    """The category's default importance (1–5)."""
    return TAXONOMY[category].default_importance


def render_taxonomy_for_prompt() -> str:
    """The categories as the LLM extractor's instructions list them: name, meaning, default importance,
    and what not to store."""
    lines = []
    for spec in _SPECS:
        lines.append(
            f'- "{spec.name}" (default importance {spec.default_importance}): {spec.description}'
            f" E.g. {'; '.join(repr(example) for example in spec.store)}."
            f" Not: {'; '.join(spec.do_not_store)}."
        )
    return "\n".join(lines)
