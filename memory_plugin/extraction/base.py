"""The fact-extractor contract: messages in, candidate facts out.

Extractors only propose. The manager then enforces the storage policy on every candidate (confidence
threshold, length, sensitive-data filter) before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable
from uuid import UUID

from ..models import MemorizedFact, Message

__all__ = [
    "SUMMARY_LANGUAGE_NAMES",
    "ExtractionOutcome",
    "FactExtractor",
    "SummarizingExtractor",
    "SummaryAnswer",
    "SummaryHost",
    "SummaryRequest",
]

SUMMARY_LANGUAGE_NAMES: dict[str, str] = {"es": "Spanish (español)", "en": "English"}
"""How a summarizer's prompt names each language a rolling summary is written in."""


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """The rolling summary to rewrite in the same model call as an extraction (the summary is due)."""

    previous: str | None
    """The current summary (None: the first one)."""
    messages: tuple[Message, ...]
    """The messages the summary does not cover yet, oldest first; some may precede the extraction's own
    (already extracted: shown for the summary only)."""
    language: Literal["es", "en"]
    """The conversation's language, the summary's."""
    max_tokens: int
    """Longest summary kept."""


@dataclass(frozen=True, slots=True)
class SummaryAnswer:
    """The summary an extraction call returned."""

    text: str | None = None
    """The new summary; None or empty: not written (the previous version stays)."""
    error: str | None = None
    """Why there is no summary, when there is none."""


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
    summary: SummaryAnswer | None = None
    """The rolling summary written in the same call (`SummarizingExtractor`); None when none was asked."""


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


@runtime_checkable
class SummarizingExtractor(FactExtractor, Protocol):
    """An extractor that can also rewrite the rolling summary in its one model call (`LLMExtractor`)."""

    async def extract_with_summary(
        self, messages: Sequence[Message], *, known_facts: Sequence[MemorizedFact] = (), summary: SummaryRequest
    ) -> ExtractionOutcome:
        """As `extract`, and the summary `summary` asks for in `ExtractionOutcome.summary` (a failed or empty
        summary is an answer without text; the facts are kept). Raises `ExtractionError` as `extract`."""
        ...


class SummaryHost(Protocol):
    """Who keeps the rolling summaries (`ContextBuilder`): says when one is due on an extraction and stores
    what the extraction's call wrote."""

    async def summary_request(
        self, session_id: str, user_id: UUID, messages: Sequence[Message]
    ) -> SummaryRequest | None:
        """The summary to rewrite with this extraction, given the session's recent `messages` (oldest first);
        None when it is not due."""
        ...

    async def summary_answered(
        self, session_id: str, user_id: UUID, request: SummaryRequest, answer: SummaryAnswer
    ) -> None:
        """Store the summary the extraction wrote (a failed or empty one keeps the previous version)."""
        ...
