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

Importing the package imports none of them: each name loads its module on first use (`_LAZY`). Compiling the
filters' patterns takes ~0.1 s of CPU, which `MemorySettings` (it names `HealthNotesConsent`) and a process that
only embeds or reads should not pay.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .health import HealthScreen, looks_spanish, screen_health
    from .health_consent import HealthNotesConsent
    from .json_values import JsonRedaction, redact_json, redact_json_value
    from .offload import OFFLOAD_THRESHOLD_CHARS, redact_note_text_async, run_filter, sanitize_fact_text_async
    from .own_health import ClinicalSpan, find_own_clinical_spans
    from .policy import (
        HEALTH_PLACEHOLDER_EN,
        HEALTH_PLACEHOLDER_ES,
        DropReason,
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

_LAZY = {
    "HealthScreen": "health",
    "looks_spanish": "health",
    "screen_health": "health",
    "JsonRedaction": "json_values",
    "redact_json": "json_values",
    "redact_json_value": "json_values",
    "OFFLOAD_THRESHOLD_CHARS": "offload",
    "redact_note_text_async": "offload",
    "run_filter": "offload",
    "sanitize_fact_text_async": "offload",
    "ClinicalSpan": "own_health",
    "find_own_clinical_spans": "own_health",
    "HealthNotesConsent": "health_consent",
    "HEALTH_PLACEHOLDER_EN": "policy",
    "HEALTH_PLACEHOLDER_ES": "policy",
    "DropReason": "policy",
    "NoteRedaction": "policy",
    "SanitizedText": "policy",
    "redact_note_text": "policy",
    "sanitize_fact_text": "policy",
    "sanitize_item_text": "policy",
    "Redaction": "redaction",
    "contains_sensitive": "redaction",
    "redact_sensitive": "redaction",
}
"""Public name -> the submodule that defines it, imported on first access (`from memory_plugin.privacy import X`
works as before)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
