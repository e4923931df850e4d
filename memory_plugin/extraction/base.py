"""The fact-extractor contract: messages in, candidate facts out.

Extractors only propose. The manager then enforces the storage policy on every candidate (confidence
threshold, length, sensitive-data filter) before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..models import MemorizedFact, Message

__all__ = ["ExtractionOutcome", "FactExtractor"]


@dataclass(slots=True)
class ExtractionOutcome:
    """What one extraction produced."""

    facts: list[MemorizedFact] = field(default_factory=list)
    """Valid candidate facts, with `source_message_ids` set to the messages they came from."""
    rejected: int = 0
    """Items the extractor returned that failed validation (unknown category, bad confidence, empty...),
    dropped one by one without discarding the rest of the batch."""
    model_calls: int = 0
    """Model requests made (0 for rule-based extraction)."""
    rejections: dict[str, int] = field(default_factory=dict)
    """`rejected` by reason: "empty", "too_long", "unknown_category", "unknown_source", "bad_confidence",
    "invalid"."""
    dropped_fields: dict[str, int] = field(default_factory=dict)
    """Optional fields removed from otherwise valid items: "replaces" (not one of the candidate facts' ids),
    "expires_at" (unreadable, or not after the message it comes from)."""


@runtime_checkable
class FactExtractor(Protocol):
    """Turns a conversation excerpt into candidate long-term facts."""

    @property
    def name(self) -> str:
        """Short name for logs and status ("rules", "llm:openai:gpt-4o-mini")."""
        ...

    async def extract(
        self, messages: Sequence[Message], *, known_facts: Sequence[MemorizedFact] = ()
    ) -> ExtractionOutcome:
        """Propose facts stated in `messages`. `known_facts` are the user's current candidate facts (with
        their ids): an extractor may mark a new fact as replacing one of them (`MemorizedFact.replaces`) and
        should restate a repeated fact in the known wording, so that it reinforces instead of duplicating.

        Raises `ExtractionError` when the model fails or its output is unusable as a whole.
        """
        ...
