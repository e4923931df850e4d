"""What never reaches long-term memory: the sensitive-data policy every write goes through.

- `redaction.py`: payment cards (Luhn), IBANs (mod 97), national ids, SSNs, passwords and API keys →
  placeholders, judged by checksums and context words, in linear time; its passes live in `api_keys.py`
  (provider keys, tokens, private keys, connection strings), `identifiers.py` (IBAN, DNI/NIE, SSN),
  `cards.py`, `passwords.py`, over the shared gates and triggers of `scan.py`.
- `health.py`: clinical details of an extracted fact reduced to a non-clinical note or
  dropped.
- `own_health.py`: the speaker's own clinical detail in a verbatim note, as spans to redact.
- `policy.py`: both, in order, as applied to facts (`sanitize_fact_text`), verbatim notes (`redact_note_text`)
  and other items before they are stored.
- `json_values.py`: the secret filter over every string of a JSON value (metadata, speakers).
- `offload.py`: the filter on large input in a worker thread, off the event loop.
"""

from .health import HealthScreen, looks_spanish, screen_health
from .json_values import JsonRedaction, redact_json, redact_json_value
from .offload import OFFLOAD_THRESHOLD_CHARS, redact_note_text_async, run_filter, sanitize_fact_text_async
from .own_health import ClinicalSpan, find_own_clinical_spans
from .policy import (
    HEALTH_PLACEHOLDER_EN,
    HEALTH_PLACEHOLDER_ES,
    DropReason,
    HealthNotesConsent,
    NoteRedaction,
    SanitizedText,
    redact_note_text,
    sanitize_fact_text,
    sanitize_item_text,
)
from .redaction import Redaction, contains_sensitive, redact_sensitive

__all__ = [
    "HEALTH_PLACEHOLDER_EN",
    "HEALTH_PLACEHOLDER_ES",
    "OFFLOAD_THRESHOLD_CHARS",
    "ClinicalSpan",
    "DropReason",
    "HealthNotesConsent",
    "HealthScreen",
    "JsonRedaction",
    "NoteRedaction",
    "Redaction",
    "SanitizedText",
    "contains_sensitive",
    "find_own_clinical_spans",
    "looks_spanish",
    "redact_json",
    "redact_json_value",
    "redact_note_text",
    "redact_note_text_async",
    "redact_sensitive",
    "run_filter",
    "sanitize_fact_text",
    "sanitize_fact_text_async",
    "sanitize_item_text",
    "screen_health",
]
