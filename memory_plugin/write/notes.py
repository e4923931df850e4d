"""`Note`: a memory stored as given by `MemoryManager.remember`, without a model call (mem0's `infer=False`).

A note is a fact row (`kind = 'fact'`) whose `content_hash` covers its category, content *and* metadata, so
only an exact repeat (same text, same metadata) merges into the stored row and reinforces it; two turns of a
conversation that say the same words at different moments (`metadata={"dia_id": …}`) stay two memories.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from ..models import CleanText, FactCategory, FactSource, MemoryModel, StorableTime
from ..rows import MemoryItem
from ..text import content_hash, unstorable_reason

__all__ = ["MAX_METADATA_CHARS", "Note", "note_item"]

MAX_METADATA_CHARS = 16_384
"""A note's metadata as JSON: turn ids, speakers and tags fit many times over; a blob does not belong here."""


class Note(MemoryModel):
    """One memory to store as given: `Note(content="Prefiere aluminio 7075", category="preference")`."""

    model_config = ConfigDict(frozen=True)

    content: CleanText
    """The text to remember, as it should be found and shown."""
    category: FactCategory = "fact"
    """What kind of fact it is (`memory_plugin.taxonomy`); `fact` (default) for anything that is not a
    preference, requirement, goal… (a conversation turn, an event)."""
    occurred_at: StorableTime | None = None
    """When it was said or happened (a question naming that date finds it); None: now."""
    expires_at: StorableTime | None = None
    """After this it is never returned (temporary memories)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Extras stored as `jsonb` (a turn id, `speaker`: a question naming that person favours their notes)."""
    session_id: str | None = None
    """The conversation it belongs to: the notes just before and after it in the session are its neighbours."""
    importance: int = Field(default=3, ge=1, le=5)
    """1 (trivia) to 5 (must never be forgotten)."""
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    """How sure it is (stated as given: 1.0 by default)."""
    source: FactSource = "explicit"
    """Stated by the user (default) or inferred."""
    sensitive: bool = False
    """Store it encrypted (needs `MemorySettings.encryption_keys`): not found by search, never embedded
    (docs/privacy.md)."""

    @field_validator("occurred_at", "expires_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        # A naive time would be read in the database session's zone: take it as UTC, explicitly.
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    @field_validator("metadata")
    @classmethod
    def _json_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            encoded = json.dumps(value, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"metadata must be JSON (str keys, JSON values): {exc}") from None
        reason = _unstorable_json(value)
        if reason is not None:
            raise ValueError(f"metadata {reason}")
        if len(encoded) > MAX_METADATA_CHARS:
            raise ValueError(f"metadata is {len(encoded):,} characters as JSON; the limit is {MAX_METADATA_CHARS:,}")
        return value


def _unstorable_json(value: Any) -> str | None:
    """Why a JSON value could not be stored as `jsonb` (a key or string with NUL or a lone surrogate)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if (reason := unstorable_reason(item)) is not None:
                return reason
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)
    return None


def note_item(note: Note) -> MemoryItem:
    """The row to write for `note`; its hash covers category, content and metadata (see the module docstring)."""
    meta = json.dumps(note.metadata, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return MemoryItem(
        kind="fact",
        category=note.category,
        content=note.content,
        content_hash=content_hash("fact", note.category, note.content, meta),
        confidence=note.confidence,
        source=note.source,
        importance=note.importance,
        session_id=note.session_id,
        occurred_at=note.occurred_at,
        expires_at=note.expires_at,
        metadata=dict(note.metadata),
        sensitive=note.sensitive,
    )
