"""Rows of `user_memory` and their conversion to and from the public models.

`MemoryItem` is what a write sends (one per row to insert or reinforce); `MemoryRecord` is a stored row.
Both backends (in-memory and Postgres) speak these, so the merge rules live once in SQL and once here in
Python for the in-memory store, and a shared contract test holds the two together.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ..models import (
    FactCategory,
    FactSource,
    LongTermMemory,
    MemorizedFact,
    ProjectRecord,
    RequestPattern,
    UserPreferences,
)
from ..quality.decay import DecayPolicy, decayed_confidence
from ..quality.matching import match_guard, match_key, match_words
from ..quality.slots import detect_slot
from ..text import content_hash

__all__ = [
    "LIST_PREFERENCE_SLOTS",
    "SINGLE_PREFERENCE_SLOTS",
    "MemoryItem",
    "MemoryKind",
    "MemoryRecord",
    "is_single_valued",
    "items_from_update",
    "long_term_from_records",
    "merge_items",
]

MemoryKind = Literal["fact", "preference", "project", "pattern"]
LIST_PREFERENCE_SLOTS = ("preferred_materials",)
SINGLE_PREFERENCE_SLOTS = ("typical_quantities", "communication_style", "industry", "location")


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One row to write: inserted, or merged into the stored row with the same `content_hash`."""

    kind: MemoryKind
    category: str
    content: str
    content_hash: str
    confidence: float = 0.6
    source: FactSource = "inferred"
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

    def as_json(self) -> dict[str, Any]:
        """The item as one element of `memory_upsert_items`'s `p_items` JSON array."""
        return {
            "kind": self.kind,
            "category": self.category,
            "content": self.content,
            "content_hash": self.content_hash,
            "confidence": self.confidence,
            "source": self.source,
            "importance": self.importance,
            "source_message_ids": list(self.source_message_ids),
            "session_id": self.session_id,
            "attributes": self.attributes,
            "occurred_at": self.occurred_at.isoformat() if self.occurred_at else None,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "metadata": self.metadata,
            "slot": self.slot,
            "match_key": self.match_key,
            "match_guard": self.match_guard,
            "match_words": list(self.match_words) if self.match_words is not None else None,
            "replaces": str(self.replaces) if self.replaces else None,
            # Only when present: the journal and memory_upsert_embedded read them; memory_upsert_items ignores them.
            **(
                {"embedding": list(self.embedding), "embedding_model": self.embedding_model}
                if self.embedding is not None
                else {}
            ),
        }


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored `user_memory` row."""

    id: UUID
    user_id: UUID
    kind: MemoryKind
    category: str
    content: str
    confidence: float
    source: FactSource
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

    def is_current(self, now: datetime) -> bool:
        """Whether it may be shown at `now`: valid, not archived, not expired."""
        return (
            self.invalid_at is None and self.archived_at is None and (self.expires_at is None or self.expires_at > now)
        )

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> MemoryRecord:
        """Build from a database row (dict row factory)."""
        return cls(
            id=row["id"],
            user_id=row["user_id"],
            kind=row["kind"],
            category=row["category"],
            content=row["content"],
            confidence=float(row["confidence"]),
            source=row["source"],
            importance=int(row["importance"]),
            relevance_count=int(row["relevance_count"]),
            source_message_ids=tuple(row["source_message_ids"] or ()),
            session_id=row["session_id"],
            attributes=dict(row["attributes"] or {}),
            content_hash=row["content_hash"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_reinforced_at=row["last_reinforced_at"],
            occurred_at=row.get("occurred_at"),
            expires_at=row.get("expires_at"),
            invalid_at=row.get("invalid_at"),
            superseded_by=row.get("superseded_by"),
            archived_at=row.get("archived_at"),
            metadata=dict(row.get("metadata") or {}),
            slot=row.get("slot"),
            match_key=row.get("match_key"),
            match_guard=row.get("match_guard"),
            match_words=tuple(row["match_words"]) if row.get("match_words") is not None else None,
        )

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

    def to_fact(self, *, confidence: float | None = None) -> MemorizedFact:
        """The row as a `MemorizedFact` (kind must be `fact`); `confidence` overrides the stored value (the
        decayed confidence shown in a context)."""
        category: FactCategory = self.category  # type: ignore[assignment]  # checked by the table's constraint
        return MemorizedFact(
            id=self.id,
            user_id=self.user_id,
            content=self.content,
            category=category,
            confidence=round(self.confidence if confidence is None else confidence, 4),
            source=self.source,
            timestamp=self.created_at,
            relevance_count=self.relevance_count,
            source_message_ids=self.source_message_ids,
            importance=self.importance,
            last_reinforced_at=self.last_reinforced_at if self.relevance_count else None,
            expires_at=self.expires_at,
            invalid_at=self.invalid_at,
            superseded_by=self.superseded_by,
        )

    def to_project(self) -> ProjectRecord:
        """The row as a `ProjectRecord` (kind must be `project`)."""
        attrs = self.attributes
        return ProjectRecord(
            id=self.id,
            description=self.content,
            materials=tuple(attrs.get("materials") or ()),
            quantity=attrs.get("quantity"),
            status=attrs.get("status") or "requested",
            timestamp=self.created_at,
            session_id=self.session_id,
        )

    def to_pattern(self) -> RequestPattern:
        """The row as a `RequestPattern` (kind must be `pattern`)."""
        return RequestPattern(
            description=self.content, occurrences=self.relevance_count + 1, last_seen=self.last_reinforced_at
        )


def is_single_valued(item: MemoryItem | MemoryRecord) -> bool:
    """Whether the item fills a single-valued preference slot, so a new value replaces the old one."""
    return item.kind == "preference" and item.category in SINGLE_PREFERENCE_SLOTS


def _fact_item(fact: MemorizedFact, session_id: str | None) -> MemoryItem:
    return MemoryItem(
        kind="fact",
        category=fact.category,
        content=fact.content,
        content_hash=content_hash("fact", fact.category, fact.content),
        confidence=fact.confidence,
        source=fact.source,
        importance=fact.importance,
        source_message_ids=fact.source_message_ids,
        session_id=session_id,
        occurred_at=fact.timestamp,
        expires_at=fact.expires_at,
        slot=detect_slot(fact.content, fact.category),
        match_key=match_key(fact.content),
        match_guard=match_guard(fact.content),
        match_words=match_words(fact.content),
        replaces=fact.replaces,
    )


def _preference_items(prefs: UserPreferences, session_id: str | None) -> list[MemoryItem]:
    items = [
        MemoryItem(
            kind="preference",
            category="preferred_materials",
            content=material,
            content_hash=content_hash("preference", "preferred_materials", material),
            confidence=0.9,
            source="explicit",
            session_id=session_id,
        )
        for material in prefs.preferred_materials
    ]
    for slot in SINGLE_PREFERENCE_SLOTS:
        value = getattr(prefs, slot)
        if value is not None:
            # Hashed by slot only: a new value replaces the old one instead of adding a second row.
            items.append(
                MemoryItem(
                    kind="preference",
                    category=slot,
                    content=str(value),
                    content_hash=content_hash("preference", slot),
                    confidence=0.9,
                    source="explicit",
                    session_id=session_id,
                )
            )
    return items


def _project_item(project: ProjectRecord, session_id: str | None) -> MemoryItem:
    return MemoryItem(
        kind="project",
        category="project",
        content=project.description,
        # Projects are history: each one is its own row, never merged.
        content_hash=content_hash("project", str(project.id)),
        confidence=1.0,
        source="explicit",
        session_id=project.session_id or session_id,
        attributes={"materials": list(project.materials), "quantity": project.quantity, "status": project.status},
        occurred_at=project.timestamp,
    )


def _pattern_item(pattern: str, session_id: str | None) -> MemoryItem:
    return MemoryItem(
        kind="pattern",
        category="pattern",
        content=pattern,
        content_hash=content_hash("pattern", pattern),
        confidence=0.8,
        source="inferred",
        session_id=session_id,
    )


def items_from_update(
    facts: Iterable[MemorizedFact],
    preferences: UserPreferences | None,
    project: ProjectRecord | None,
    patterns: Iterable[str],
    session_id: str | None,
) -> list[MemoryItem]:
    """Turn the parts of a `MemoryUpdate` into rows to write, merging repeats within the batch.

    Postgres refuses an `INSERT ... ON CONFLICT DO UPDATE` that touches the same row twice, so items with
    the same hash are folded here first (the stronger confidence and importance win).
    """
    items = [_fact_item(f, session_id) for f in facts]
    if preferences is not None:
        items.extend(_preference_items(preferences, session_id))
    if project is not None:
        items.append(_project_item(project, session_id))
    items.extend(_pattern_item(p, session_id) for p in patterns)
    merged: dict[str, MemoryItem] = {}
    for item in items:
        previous = merged.get(item.content_hash)
        if previous is None or is_single_valued(item):
            merged[item.content_hash] = item  # new, or a later value of a single-valued slot wins
        else:
            merged[item.content_hash] = merge_items(previous, item)
    return list(merged.values())


def merge_items(previous: MemoryItem, item: MemoryItem) -> MemoryItem:
    """Fold `item` into `previous`, an earlier item of the same write it repeats: the earlier wording stays,
    confidence and importance take the max, provenance accumulates, a `replaces` of either is kept."""
    return MemoryItem(
        kind=previous.kind,
        category=previous.category,
        content=previous.content,
        content_hash=previous.content_hash,
        confidence=max(previous.confidence, item.confidence),
        source="explicit" if "explicit" in (previous.source, item.source) else "inferred",
        importance=max(previous.importance, item.importance),
        source_message_ids=tuple(dict.fromkeys(previous.source_message_ids + item.source_message_ids)),
        session_id=item.session_id,
        attributes={**previous.attributes, **item.attributes},
        occurred_at=previous.occurred_at,
        expires_at=None
        if previous.expires_at is None or item.expires_at is None
        else max(previous.expires_at, item.expires_at),
        metadata={**previous.metadata, **item.metadata},
        slot=previous.slot,
        match_key=previous.match_key,
        match_guard=previous.match_guard,
        match_words=previous.match_words,
        replaces=previous.replaces or item.replaces,
        embedding=previous.embedding,
        embedding_model=previous.embedding_model,
    )


def long_term_from_records(
    records: Sequence[MemoryRecord], *, now: datetime | None = None, decay: DecayPolicy | None = None
) -> LongTermMemory:
    """Assemble the `LongTermMemory` from the rows of a context query (facts already ranked, rejections
    after them). With `decay` (and `now`), facts carry their decayed confidence (`quality/decay.py`)."""
    facts: list[MemorizedFact] = []
    projects: list[ProjectRecord] = []
    patterns: list[RequestPattern] = []
    materials: list[str] = []
    singles: dict[str, str] = {}
    for record in records:
        if record.kind == "fact":
            shown = (
                decayed_confidence(record.confidence, record.last_reinforced_at, record.category, now, decay)
                if decay is not None and now is not None
                else None
            )
            facts.append(record.to_fact(confidence=shown))
        elif record.kind == "project":
            projects.append(record.to_project())
        elif record.kind == "pattern":
            patterns.append(record.to_pattern())
        elif record.category in LIST_PREFERENCE_SLOTS:
            materials.append(record.content)
        else:
            singles[record.category] = record.content
    style = singles.get("communication_style")
    preferences = UserPreferences(
        preferred_materials=materials,
        typical_quantities=singles.get("typical_quantities"),
        communication_style=style if style in ("technical", "simple") else None,  # type: ignore[arg-type]
        industry=singles.get("industry"),
        location=singles.get("location"),
    )
    return LongTermMemory(facts=facts, preferences=preferences, projects=projects, patterns=patterns)
