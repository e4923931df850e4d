"""What never reaches long-term memory: the sensitive-data policy every write goes through.

- `redaction.py`: payment cards (Luhn), IBANs (mod 97), national ids, passwords and API keys → placeholders.
- `health.py`: clinical details reduced to a non-clinical note (seed 000's HEALTH_NOTE) or dropped.
- `policy.py`: both, in order, as applied to facts and other items before they are stored.
"""

from .health import HealthScreen, looks_spanish, screen_health
from .policy import DropReason, SanitizedText, sanitize_fact_text, sanitize_item_text
from .redaction import Redaction, contains_sensitive, redact_sensitive

__all__ = [
    "DropReason",
    "HealthScreen",
    "Redaction",
    "SanitizedText",
    "contains_sensitive",
    "looks_spanish",
    "redact_sensitive",
    "sanitize_fact_text",
    "sanitize_item_text",
    "screen_health",
]
