"""The sensitive-data policy every write to long-term memory goes through.

Two filters, in this order:
1. `redaction.redact_sensitive`: payment cards (Luhn-valid), IBANs (mod-97-valid), Spanish DNI/NIE and US SSNs
   (checksums), stated passwords and API keys become ``[redacted <kind>]``; a fact with nothing else left is
   dropped.
2. `health.screen_health`: clinical details (diagnoses, medications and doses, test results) are reduced to
   a non-clinical `health_note` ("Tiene una condición médica que afecta a los turnos"), or the fact is dropped
   when nothing useful for the service remains.

Verbatim notes (what a person wrote: `remember`, `remember_many`, imported conversation turns) go through
`redact_note_text` instead: secrets as above, and only the speaker's own clinical detail
(`own_health.find_own_clinical_spans`) replaced by ``[health detail]`` / ``[dato de salud]``; the rest of the
message is kept and stays searchable, and a note is dropped only when nothing meaningful is left. Extracted
facts keep the stricter rule of `sanitize_fact_text` (reduce to a `health_note` or drop), because a fact is a
single statement about the user: any clinical word in it is about them.

`sanitize_fact_text` is the pure function; `MemoryManager.sanitize_fact` wraps it with the manager's counters
and logging and is the hook for every write path (`update_memory`, the memory tools' `remember`, imports,
extraction output). `sanitize_item_text` applies filter 1 to the text of preferences, projects and patterns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..models import FactCategory
from .health import looks_spanish, screen_health
from .health_consent import HealthNotesConsent
from .own_health import own_clinical_span_bounds
from .redaction import redact_sensitive

__all__ = [
    "HEALTH_PLACEHOLDER_EN",
    "HEALTH_PLACEHOLDER_ES",
    "DropReason",
    "HealthNotesConsent",
    "NoteRedaction",
    "SanitizedText",
    "redact_note_text",
    "sanitize_fact_text",
    "sanitize_item_text",
]

HEALTH_PLACEHOLDER_EN = "[health detail]"
"""What replaces the speaker's own clinical detail in an English note."""
HEALTH_PLACEHOLDER_ES = "[dato de salud]"
"""What replaces the speaker's own clinical detail in a Spanish note."""

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


@dataclass(frozen=True, slots=True)
class NoteRedaction:
    """The outcome of `redact_note_text`."""

    text: str | None
    """What may be stored, or None when nothing meaningful is left (see `dropped`)."""
    redacted: tuple[str, ...] = ()
    """Kinds of sensitive data replaced by placeholders ("payment_card", "iban", …)."""
    clinical: tuple[str, ...] = ()
    """Kinds of the speaker's own clinical detail replaced ("diagnosis", "medication", "test_result")."""
    dropped: DropReason | None = None
    """Why `text` is None."""
    health_note: bool = False
    """True when, under ``keep_notes`` consent, the note was reduced to a non-clinical health note."""

    @property
    def changed(self) -> bool:
        """True when anything was redacted or the note was dropped."""
        return bool(self.redacted or self.clinical) or self.text is None


# The language of a note is read from its start: 2,000 characters hold ~100 function words, plenty to tell
# Spanish from English, and a 16,000-character note costs no more than a short one.
_LANGUAGE_SAMPLE_CHARS = 2_000

_PLACEHOLDER = re.compile(r"\[(?:redacted [a-z_]+|health detail[^\]]*|dato de salud[^\]]*)\]")
# `_MIN_REMAINING_CHARS` letters or digits, found without listing every one of a long note.
_MEANINGFUL = re.compile(r"\w(?:\W*+\w){" + str(_MIN_REMAINING_CHARS - 1) + "}")


def _nothing_left(text: str) -> bool:
    """Whether `text` holds fewer than `_MIN_REMAINING_CHARS` letters or digits besides placeholders."""
    return _MEANINGFUL.search(_PLACEHOLDER.sub("", text)) is None


def redact_note_text(text: str, *, consent: HealthNotesConsent = "off") -> NoteRedaction:
    """Apply the sensitive-data policy to a verbatim note (a message someone wrote). Pure: no I/O.

    Secrets become ``[redacted <kind>]``; the speaker's own clinical detail becomes ``[health detail]`` (or
    ``[dato de salud]`` in Spanish); everything else is kept as written. Other people's health, public events,
    figures of speech, hypotheticals and questions are left alone. Linear in the length of `text`.

    >>> redact_note_text("Turns out I'm covid positive, so I cancelled the trip to Bilbao").text
    'Turns out [health detail], so I cancelled the trip to Bilbao'
    """
    redaction = redact_sensitive(text)
    cleaned = redaction.text
    spans = own_clinical_span_bounds(cleaned)
    clinical: list[str] = []
    if spans:
        spanish = looks_spanish(cleaned[:_LANGUAGE_SAMPLE_CHARS])
        base = HEALTH_PLACEHOLDER_ES if spanish else HEALTH_PLACEHOLDER_EN
        # One placeholder for the whole note (the note says what the condition affects, once): computed once,
        # so a note with many spans stays linear.
        placeholder = _placeholder_with_note(cleaned, base) if consent == "keep_notes" else base
        pieces: list[str] = []
        cursor = 0
        for start, end, span_kinds in spans:
            pieces.append(cleaned[cursor:start] + placeholder)
            cursor = end
            clinical.extend(k for k in span_kinds if k not in clinical)
        pieces.append(cleaned[cursor:])
        cleaned = "".join(pieces)
    kinds = tuple(clinical)
    if (kinds or redaction.kinds) and _nothing_left(cleaned):
        if kinds and consent == "keep_notes":
            note = screen_health(text).note
            if note is not None:
                return NoteRedaction(note, redaction.kinds, kinds, health_note=True)
        reason: DropReason = "clinical" if kinds else "only_sensitive"
        return NoteRedaction(None, redaction.kinds, kinds, dropped=reason)
    return NoteRedaction(cleaned, redaction.kinds, kinds)


def _placeholder_with_note(text: str, base: str) -> str:
    """The placeholder naming what the condition affects ("[health detail: affects shifts]"), when the text says."""
    note = screen_health(text).note
    if note is None:
        return base
    affects = note.split(" que afecta ", 1)[-1] if base == HEALTH_PLACEHOLDER_ES else note.split(" that ", 1)[-1]
    prefix = "afecta " if base == HEALTH_PLACEHOLDER_ES else ""
    return f"{base[:-1]}: {prefix}{affects}]"


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
