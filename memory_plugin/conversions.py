"""Stored rows as the public models: a `MemoryRecord` as a `MemorizedFact`, `ProjectRecord` or
`RequestPattern`, and the rows of a context read as one `LongTermMemory` (with decayed confidence)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .crypto import is_sealed, open_text
from .models import FactCategory, LongTermMemory, MemorizedFact, ProjectRecord, RequestPattern, UserPreferences
from .quality.decay import DecayPolicy, decayed_confidence
from .rows import LIST_PREFERENCE_SLOTS, MemoryRecord

__all__ = [
    "fact_from_record",
    "long_term_from_records",
    "pattern_from_record",
    "preferences_from_records",
    "project_from_record",
    "refuse_sealed",
]


def fact_from_record(record: MemoryRecord, *, confidence: float | None = None) -> MemorizedFact:
    """The row as a `MemorizedFact` (kind must be `fact`); `confidence` overrides the stored value (the
    decayed confidence shown in a context). `EncryptionKeyError` for a row still sealed."""
    _refuse_if_sealed(record)
    return _fact(record, confidence)


def _fact(record: MemoryRecord, confidence: float | None) -> MemorizedFact:
    """`fact_from_record` for a row known not to be sealed."""
    category: FactCategory = record.category  # type: ignore[assignment]  # checked by the table's constraint
    return MemorizedFact(
        id=record.id,
        user_id=record.user_id,
        content=record.content,
        category=category,
        confidence=round(record.confidence if confidence is None else confidence, 4),
        source=record.source,
        timestamp=record.created_at,
        relevance_count=record.relevance_count,
        source_message_ids=record.source_message_ids,
        importance=record.importance,
        last_reinforced_at=record.last_reinforced_at if record.relevance_count else None,
        expires_at=record.expires_at,
        invalid_at=record.invalid_at,
        superseded_by=record.superseded_by,
        sensitive=record.sensitive,
    )


def project_from_record(record: MemoryRecord) -> ProjectRecord:
    """The row as a `ProjectRecord` (kind must be `project`)."""
    attrs = record.attributes
    return ProjectRecord(
        id=record.id,
        description=record.content,
        materials=tuple(attrs.get("materials") or ()),
        quantity=attrs.get("quantity"),
        status=attrs.get("status") or "requested",
        timestamp=record.created_at,
        session_id=record.session_id,
    )


def pattern_from_record(record: MemoryRecord) -> RequestPattern:
    """The row as a `RequestPattern` (kind must be `pattern`)."""
    return RequestPattern(
        description=record.content, occurrences=record.relevance_count + 1, last_seen=record.last_reinforced_at
    )


def refuse_sealed(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """`records`, or `EncryptionKeyError` if one is still sealed: read without keys (the store that opens sealed
    rows is there only while `MEMORY_ENCRYPTION_KEYS` is set), it must not be shown as ciphertext."""
    for record in records:
        _refuse_if_sealed(record)
    return list(records)


def _refuse_if_sealed(record: MemoryRecord) -> None:
    if is_sealed(record.content):  # opening without keys raises the typed error that names the key
        open_text(None, record.content, user_id=record.user_id, kind=record.kind, category=record.category)


def long_term_from_records(
    records: Sequence[MemoryRecord], *, now: datetime | None = None, decay: DecayPolicy | None = None
) -> LongTermMemory:
    """Assemble the `LongTermMemory` from the rows of a context query (facts already ranked, rejections
    after them). With `decay` (and `now`), facts carry their decayed confidence (`quality/decay.py`)."""
    facts: list[MemorizedFact] = []
    projects: list[ProjectRecord] = []
    patterns: list[RequestPattern] = []
    for record in records:
        if is_sealed(record.content):
            continue  # a sealed row no key opened (no keys configured): never shown as ciphertext
        if record.kind == "fact":
            shown = (
                decayed_confidence(record.confidence, record.last_reinforced_at, record.category, now, decay)
                if decay is not None and now is not None
                else None
            )
            facts.append(_fact(record, shown))  # sealed rows were left out above: checked once per row
        elif record.kind == "project":
            projects.append(project_from_record(record))
        elif record.kind == "pattern":
            patterns.append(pattern_from_record(record))
    preferences = preferences_from_records(records)
    return LongTermMemory(facts=facts, preferences=preferences, projects=projects, patterns=patterns)


def preferences_from_records(records: Sequence[MemoryRecord]) -> UserPreferences:
    """The user's `UserPreferences` from their stored rows (the `preference` ones; others are ignored), in the
    rows' order (newest first): the one derivation, used for `LongTermMemory.preferences` and for the profile
    the context's slots show, so the two cannot disagree."""
    materials: list[str] = []
    singles: dict[str, str] = {}
    for record in records:
        if record.kind != "preference":
            continue
        if record.category in LIST_PREFERENCE_SLOTS:
            materials.append(record.content)
        else:
            singles[record.category] = record.content
    style = singles.get("communication_style")
    return UserPreferences(
        preferred_materials=materials,
        typical_quantities=singles.get("typical_quantities"),
        communication_style=style if style in ("technical", "simple") else None,  # type: ignore[arg-type]
        industry=singles.get("industry"),
        location=singles.get("location"),
    )
