"""What the intent classifier answers: the intents, the entity kinds and `Classification` (both the LLM
classifier and the offline rules answer it)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field, field_validator

from .folding import fold

__all__ = ["ENTITY_KINDS", "Classification", "EntityKind", "Intent"]

Intent = Literal["budget_request", "order_status", "technical_question", "feedback", "greeting", "other"]
"""What the user wants from this message."""
EntityKind = Literal["materials", "services", "quantity", "tolerances", "certifications", "budget", "deadline"]
"""The entity kinds a budget request is made of."""
ENTITY_KINDS: tuple[str, ...] = get_args(EntityKind)

_MAX_VALUES_PER_KIND = 10
_MAX_VALUE_CHARS = 120  # below the session store's 200-character entity limit
_KIND_ALIASES = {
    "material": "materials",
    "service": "services",
    "process": "services",
    "processes": "services",
    "quantities": "quantity",
    "tolerance": "tolerances",
    "certification": "certifications",
    "certificates": "certifications",
    "price": "budget",
    "deadlines": "deadline",
    "delivery": "deadline",
}


class Classification(BaseModel):
    """The classification of one user message."""

    intent: Intent = Field(description="What the user wants with this message.")
    entities: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "Entities mentioned in this message, by kind: materials, services, quantity, tolerances, "
            "certifications, budget, deadline. Omit kinds that are not mentioned."
        ),
    )
    request_complete: bool = Field(
        default=False,
        description='True when the user confirms or closes the budget request ("lo confirmo", "adelante").',
    )
    explicit_preference: bool = Field(
        default=False,
        description=(
            'True when the user states a lasting preference or requirement ("prefiero", "siempre", '
            '"recuerda", "en todas las piezas", "I prefer", "always", "remember"); false for a rejection '
            '("nunca me sugieras X", "never suggest X", "X no nos sirve").'
        ),
    )

    @field_validator("entities")
    @classmethod
    def _clean_entities(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        # An LLM may answer "material" or add kinds of its own, or overlong values; keep what the session
        # store accepts rather than fail the turn.
        clean: dict[str, list[str]] = {}
        for raw_kind, values in value.items():
            kind = raw_kind.strip().lower()
            kind = _KIND_ALIASES.get(kind, kind)
            if kind not in ENTITY_KINDS:
                continue
            bucket = clean.setdefault(kind, [])
            seen = {fold(v) for v in bucket}
            for item in values:
                text = " ".join(item.replace("\x00", " ").split())[:_MAX_VALUE_CHARS]
                if text and fold(text) not in seen and len(bucket) < _MAX_VALUES_PER_KIND:
                    seen.add(fold(text))
                    bucket.append(text)
        return {kind: values for kind, values in clean.items() if values}
