"""`Note`: a memory stored as given by `MemoryManager.remember`, without a model call (mem0's `infer=False`).

A note is a fact row (`kind = 'fact'`) whose `content_hash` covers its category, content *and* metadata, so
only an exact repeat (same text, same metadata) merges into the stored row and reinforces it; two turns of a
conversation that say the same words at different moments (`metadata={"dia_id": …}`) stay two memories.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .models import CleanText, FactCategory, FactSource
from .rows import MemoryItem
from .text import content_hash

__all__ = ["Note", "note_item"]


class Note(BaseModel):
    """One memory to store as given: `Note(content="Prefiere aluminio 7075", category="preference")`."""

    model_config = ConfigDict(frozen=True)

    content: CleanText
    """The text to remember, as it should be found and shown."""
    category: FactCategory = "fact"
    """What kind of fact it is (`memory_plugin.taxonomy`); `fact` (default) for anything that is not a
    preference, requirement, goal… (a conversation turn, an event)."""
    occurred_at: datetime | None = None
    """When it was said or happened (a question naming that date finds it); None: now."""
    expires_at: datetime | None = None
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

    @field_validator("occurred_at", "expires_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        # A naive time would be read in the database session's zone: take it as UTC, explicitly.
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    @field_validator("metadata")
    @classmethod
    def _json_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be JSON (str keys, JSON values): {exc}") from None
        return value


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
    )
