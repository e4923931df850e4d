"""The sensitive-data policy every write to long-term memory goes through.

Two filters, in this order:
1. `redaction.redact_sensitive`: payment cards (Luhn-valid), IBANs (mod-97-valid), Spanish DNI/NIE and US SSNs
   (checksums), stated passwords and API keys become ``[redacted <kind>]``; a fact with nothing else left is
   dropped.
2. `health.screen_health`: clinical details (diagnoses, medications and doses, test results) are reduced to
   a non-clinical `health_note` ("Tiene una condición médica que afecta a los turnos"), or the fact is dropped
   when nothing useful for the service remains.

`sanitize_fact_text` is the pure function; `MemoryManager.sanitize_fact` wraps it with the manager's counters
and logging and is the hook for every write path (`update_memory`, the memory tools' `remember`, imports,
extraction output). `sanitize_item_text` applies filter 1 to the text of preferences, projects and patterns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..models import FactCategory
from .health import screen_health
from .redaction import redact_sensitive

__all__ = ["DropReason", "SanitizedText", "sanitize_fact_text", "sanitize_item_text"]

DropReason = Literal["only_sensitive", "clinical"]
"""Why a fact was not stored: nothing but sensitive data in it, or clinical detail with nothing else useful."""

# A fact needs a few real characters besides placeholders to say anything.
_MIN_REMAINING_CHARS = 3


@dataclass(frozen=True, slots=True)
class SanitizedText:
    """The outcome of `sanitize_fact_text`."""

    text: str | None
    """What may be stored, or None when the fact must not be stored at all (see `dropped`)."""
    category: FactCategory
    """The category to store it under (`health_note` when clinical detail was reduced to a note)."""
    redacted: tuple[str, ...] = ()
    """Kinds of sensitive data replaced by placeholders ("payment_card", "iban", …)."""
    clinical: tuple[str, ...] = ()
    """Kinds of clinical detail found ("diagnosis", "medication", "test_result")."""
    dropped: DropReason | None = None
    """Why `text` is None."""

    @property
    def health_reduced(self) -> bool:
        """True when clinical detail was replaced by a non-clinical note."""
        return bool(self.clinical) and self.text is not None


def _only_placeholders(text: str, kinds: tuple[str, ...]) -> bool:
    remaining = text
    for kind in kinds:
        remaining = remaining.replace(f"[redacted {kind}]", "")
    return len(remaining.strip(" .,;:-")) < _MIN_REMAINING_CHARS


def sanitize_fact_text(content: str, category: FactCategory) -> SanitizedText:
    """Apply the sensitive-data policy to one fact's text. Pure: no I/O, no counters.

    >>> sanitize_fact_text("Tiene diabetes tipo 1 y no puede hacer turnos de noche", "fact").text
    'Tiene una condición médica que afecta a los turnos'
    """
    redaction = redact_sensitive(content)
    text = redaction.text
    if redaction.kinds and _only_placeholders(text, redaction.kinds):
        return SanitizedText(None, category, redacted=redaction.kinds, dropped="only_sensitive")
    health = screen_health(text)
    if health.clinical:
        if health.note is None:
            return SanitizedText(None, category, redacted=redaction.kinds, clinical=health.clinical, dropped="clinical")
        return SanitizedText(health.note, "health_note", redacted=redaction.kinds, clinical=health.clinical)
    return SanitizedText(text, category, redacted=redaction.kinds)


def sanitize_item_text(text: str) -> tuple[str, tuple[str, ...]]:
    """Redact sensitive data from the text of a preference, project or pattern: (clean text, kinds found).

    These are short values (a material, a project line) that are never health notes, so only the
    placeholder filter applies; clinical words in them are left to the caller's own validation."""
    redaction = redact_sensitive(text)
    return redaction.text, redaction.kinds
