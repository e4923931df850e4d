"""Rows of `user_memory`: what a write sends (`MemoryItem`) and what a read returns (`MemoryRecord`).

Every store speaks these two types, so the write rules live once in SQL and once in Python (for the
in-memory store), held together by the shared contract test. This module is a leaf: it imports nothing
else of the package, so any layer may use the row types without pulling another one in. JSON in both
directions is derived from the dataclass fields (one pydantic `TypeAdapter` each), never written out by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import TypeAdapter

__all__ = [
    "CONTENT_MAX_CHARS",
    "LIST_PREFERENCE_SLOTS",
    "SINGLE_PREFERENCE_SLOTS",
    "MemoryItem",
    "MemoryKind",
    "MemoryRecord",
    "RowSource",
    "is_single_valued",
    "merge_items",
]

MemoryKind = Literal["fact", "preference", "project", "pattern"]
CONTENT_MAX_CHARS = 20_000
"""The `user_memory.content` length check (supabase/schemas/10_user_memory.sql); settings are checked against it."""
RowSource = Literal["explicit", "inferred"]
"""How a row was learned: said by the user, or inferred (the same values as `models.FactSource`)."""
LIST_PREFERENCE_SLOTS = ("preferred_materials",)
SINGLE_PREFERENCE_SLOTS = ("typical_quantities", "communication_style", "industry", "location")
_COLLECTIONS_NULLABLE_IN_ROWS = ("source_message_ids", "attributes", "metadata")


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One row to write: inserted, or merged into the stored row with the same `content_hash`."""

    kind: MemoryKind
    category: str
    content: str
    content_hash: str
    confidence: float = 0.6
    source: RowSource = "inferred"
    importance: int = 3
    source_message_ids: tuple[str, ...] = ()
    session_id: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    occurred_at: datetime | None = None
    """When it was learned (the conversation's time); `now()` at write time when None."""
    expires_at: datetime | None = None
    """After this it is never shown (temporary memories); None: never expires."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Caller-supplied extras (a turn id, a speaker), stored as `jsonb`."""
    slot: str | None = None
    """Facts: the slot it fills (`quality/slots.py`); a new current fact of a slot supersedes the old one."""
    match_key: str | None = None
    """Facts: the normalised text compared for near-duplicates (`quality/matching.py`)."""
    match_guard: str | None = None
    """Facts: negation and numbers, which a near-duplicate must share exactly."""
    match_words: tuple[str, ...] | None = None
    """Facts: content words (stemmed); a near-duplicate adds or drops words, never swaps one."""
    replaces: UUID | None = None
    """Facts: a current fact of the user this one supersedes (set by the extractor or the caller)."""
    embedding: tuple[float, ...] | None = None
    """Facts: the content's embedding, computed at write time (stored in `memory_search_docs`)."""
    embedding_model: str | None = None
    """The model that computed `embedding`."""
    sensitive: bool = False
    """Sealed at rest (`memory_plugin.crypto`): the store keeps only its ciphertext, no search row, no vector and
    no near-duplicate keys. Set by the caller (`remember(..., sensitive=True)`) or by the category
    (`MemorySettings.sensitive_categories`)."""

    def as_json(self) -> dict[str, Any]:
        """The item as JSON: one element of `memory_upsert_items`'s `p_items` array, and a journal line's item.
        The embedding is present only when computed (`memory_upsert_items` ignores it), `sensitive` only when
        true."""
        data: dict[str, Any] = _ITEM.dump_python(self, mode="json")
        if self.embedding is None:
            del data["embedding"], data["embedding_model"]
        if not self.sensitive:
            del data["sensitive"]
        return data

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MemoryItem:
        """The inverse of `as_json`."""
        return _ITEM.validate_python(_without_nulls(raw))


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored `user_memory` row."""

    id: UUID
    user_id: UUID
    kind: MemoryKind
    category: str
    content: str
    confidence: float
    source: RowSource
    importance: int
    relevance_count: int
    source_message_ids: tuple[str, ...]
    session_id: str | None
    attributes: dict[str, Any]
    content_hash: str
    created_at: datetime
    updated_at: datetime
    last_reinforced_at: datetime
    occurred_at: datetime | None = None
    """When the conversation that stated it happened, if known."""
    expires_at: datetime | None = None
    """Not shown after this time."""
    invalid_at: datetime | None = None
    """When it stopped being true (kept as history)."""
    superseded_by: UUID | None = None
    """The memory that replaced it."""
    archived_at: datetime | None = None
    """When maintenance archived it (decayed below the floor)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Caller-supplied extras."""
    slot: str | None = None
    """Facts: the slot it fills, if any."""
    match_key: str | None = None
    """Facts: the normalised text compared for near-duplicates."""
    match_guard: str | None = None
    """Facts: negation and numbers a near-duplicate must share."""
    match_words: tuple[str, ...] | None = None
    """Facts: content words (stemmed) compared for near-duplicates."""
    key_id: str | None = None
    """The id of the key the row is sealed with (`memory_plugin.crypto`); None: stored as plain text. A record
    read through the manager carries the plain `content` and keeps this id."""

    @property
    def sensitive(self) -> bool:
        """Whether the row is sealed at rest."""
        return self.key_id is not None

    def is_current(self, now: datetime) -> bool:
        """Whether it may be shown at `now`: valid, not archived, not expired."""
        return (
            self.invalid_at is None and self.archived_at is None and (self.expires_at is None or self.expires_at > now)
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> MemoryRecord:
        """Build from a database row (dict row factory) or its JSON (`to_jsonb`, PostgREST): columns that are
        not fields are ignored, text is parsed into UUIDs and datetimes."""
        return _RECORD.validate_python(_without_nulls({k: row[k] for k in _RECORD_FIELDS if k in row}))

    @classmethod
    def inserted(cls, user_id: UUID, item: MemoryItem, *, record_id: UUID, now: datetime) -> MemoryRecord:
        """The row `memory_upsert_items` inserts for a new `item` (its first statement: never reinforced, learned
        when it occurred, else `now`)."""
        learned_at = item.occurred_at or now
        return cls(
            id=record_id,
            user_id=user_id,
            kind=item.kind,
            category=item.category,
            content=item.content,
            confidence=item.confidence,
            source=item.source,
            importance=item.importance,
            relevance_count=0,
            source_message_ids=item.source_message_ids,
            session_id=item.session_id,
            attributes=dict(item.attributes),
            content_hash=item.content_hash,
            created_at=learned_at,
            updated_at=now,
            last_reinforced_at=learned_at,
            occurred_at=item.occurred_at,
            expires_at=item.expires_at,
            metadata=dict(item.metadata),
            slot=item.slot,
            match_key=item.match_key,
            match_guard=item.match_guard,
            match_words=item.match_words,
        )


_ITEM = TypeAdapter(MemoryItem)
_RECORD = TypeAdapter(MemoryRecord)
_RECORD_FIELDS = tuple(MemoryRecord.__dataclass_fields__)


def _without_nulls(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A row's null collections read as empty ones (a `jsonb` or array column may be null)."""
    data = dict(raw)
    for name in _COLLECTIONS_NULLABLE_IN_ROWS:
        if name in data and data[name] is None:
            del data[name]
    return data


def is_single_valued(item: MemoryItem | MemoryRecord) -> bool:
    """Whether the item fills a single-valued preference slot, so a new value replaces the old one."""
    return item.kind == "preference" and item.category in SINGLE_PREFERENCE_SLOTS


def merge_items(previous: MemoryItem, item: MemoryItem) -> MemoryItem:
    """Fold `item` into `previous`, an earlier item of the same write it repeats: the earlier wording stays,
    confidence and importance take the max, provenance accumulates, a `replaces` of either is kept, and either
    one marked sensitive marks the merged item."""
    return replace(
        previous,
        confidence=max(previous.confidence, item.confidence),
        source="explicit" if "explicit" in (previous.source, item.source) else "inferred",
        importance=max(previous.importance, item.importance),
        source_message_ids=tuple(dict.fromkeys(previous.source_message_ids + item.source_message_ids)),
        session_id=item.session_id,
        attributes={**previous.attributes, **item.attributes},
        expires_at=None
        if previous.expires_at is None or item.expires_at is None
        else max(previous.expires_at, item.expires_at),
        metadata={**previous.metadata, **item.metadata},
        replaces=previous.replaces or item.replaces,
        sensitive=previous.sensitive or item.sensitive,
    )
