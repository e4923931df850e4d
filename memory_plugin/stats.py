"""`MemoryStats`: what the manager has done since it opened, for status pages and tests.

Each service owns its counters (`WriteStats`, `ExtractionStats`, `SearchStats`, `StoreFailures`); `MemoryStats`
is their sum, read as one snapshot (`MemoryManager.stats`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["MemoryStats"]


@dataclass(slots=True)
class MemoryStats:
    """Counters since the manager opened: what a status page or a test can read."""

    messages_added: int = 0
    """Messages recorded in short-term memory."""
    exchanges_not_recorded: int = 0
    """Prompts and answers the capability could not record after the run (logged; the answer was kept)."""
    facts_written: int = 0
    """Fact rows inserted or reinforced."""
    facts_rejected: int = 0
    """Candidate facts dropped: invalid extractor items, below the confidence threshold, too long."""
    facts_redacted: int = 0
    """Facts stored with sensitive data removed."""
    facts_dropped_sensitive: int = 0
    """Facts not stored because nothing was left once sensitive data was removed."""
    extraction_calls: int = 0
    """Extractions run."""
    extraction_model_calls: int = 0
    """Model requests made by extractions."""
    extraction_failures: int = 0
    """Extractions that failed (model error, unusable output)."""
    store_failures: int = 0
    """Long-term reads that failed: answered with the cached copy (`ResilientStore`) or short-term memory only."""
    facts_embedded: int = 0
    """Facts written with their embedding."""
    embedding_failures: int = 0
    """Embedder failures: facts stored without a vector (`memory-plugin reembed` fills them), or searches run on
    text signals only."""
    searches: int = 0
    """Searches run (`search`, and `get_memory_context` with a query)."""
    searches_rewritten: int = 0
    """Searches that also searched the rewrite model's phrasings of the question (`search.rewrite_model`)."""
    search_rewrite_failures: int = 0
    """Searches whose rewrite model failed or timed out: the question was searched alone (logged once)."""
    facts_health_reduced: int = 0
    """Facts whose clinical details were replaced by a non-clinical `health_note`."""
    facts_dropped_health: int = 0
    """Facts not stored because they held clinical details and nothing else useful."""
    items_redacted: int = 0
    """Preferences, projects and patterns stored with sensitive data removed."""
    dates_resolved: int = 0
    """Facts whose relative dates ("next Friday") were rewritten as absolute dates."""
    facts_expiring: int = 0
    """Facts stored with an expiry (temporary facts)."""
    extraction_rejections: dict[str, int] = field(default_factory=dict)
    """Extractor items rejected, by reason ("unknown_category", "bad_confidence", "empty", "too_long"...);
    their total is part of `facts_rejected`."""
    extraction_fields_dropped: int = 0
    """Optional fields removed from extracted facts: a `replaces` id that was not a candidate, a bad
    `expires_at`."""
    extractions_explicit: int = 0
    """Extractions triggered by a memory instruction ("recuerda…", "don't suggest…")."""
    extractions_end_of_request: int = 0
    """Extractions triggered by the end of a request."""
    extractions_cadence: int = 0
    """Extractions triggered by the every-N-user-messages cadence."""
    extractions_skipped: int = 0
    """Triggers whose pending messages were only small talk: no model call."""
    extraction_facts_set_aside: int = 0
    """Extracted facts not written because, even alone, their write was over a database limit (its
    `statement_timeout`...): logged and kept for review (`BackendStatus.set_aside_writes`, `memory-plugin journal`),
    and the extraction moved on (a store with nowhere to keep them leaves a background job dead with the reason)."""
    facts_inserted: int = 0
    """Fact rows inserted (new facts)."""
    facts_reinforced: int = 0
    """Stored facts stated again (exact repeats and near-duplicates) instead of inserted."""
    facts_near_duplicates: int = 0
    """Facts merged into a similar fact (stored, or earlier in the same write) instead of inserted."""
    facts_superseded: int = 0
    """Stored facts a write made no longer current (`replaces`, a new value of their slot); kept as history."""
    notes_stored: int = 0
    """Notes (`remember`, `remember_many`) stored as new memories."""
    notes_merged: int = 0
    """Notes that repeated a memory exactly (stored, or earlier in their batch) and reinforced it."""
    notes_refused: int = 0
    """Notes not stored: nothing meaningful was left once sensitive data was removed."""
    notes_redacted: int = 0
    """Notes stored with sensitive data or the speaker's own clinical detail replaced by placeholders."""

    @classmethod
    def collect(cls, *parts: Any) -> MemoryStats:
        """The sum of the services' counters: each field of `MemoryStats` adds up the same-named attribute
        of every part that has one (dicts of counts are added key by key)."""
        total = cls()
        for spec in fields(cls):
            for part in parts:
                value = getattr(part, spec.name, None)
                if value is None:
                    continue
                if isinstance(value, dict):
                    merged: dict[str, int] = getattr(total, spec.name)
                    for key, count in value.items():
                        merged[key] = merged.get(key, 0) + count
                else:
                    setattr(total, spec.name, getattr(total, spec.name) + value)
        return total
