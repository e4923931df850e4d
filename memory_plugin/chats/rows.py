"""Chat rows as the stores return them (leaf module: imports nothing of the package)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

__all__ = ["ChatHit", "ChatRow", "MessageJson"]

MessageJson = dict[str, Any]
"""One pydantic-ai `ModelMessage` in its JSON form (`ModelMessagesTypeAdapter.dump_python(mode="json")`)."""


@dataclass(frozen=True, slots=True)
class ChatRow:
    """One row of `public.chats`."""

    id: UUID
    user_id: UUID
    title: str | None
    title_is_user: bool
    title_terms: tuple[str, ...]
    full_history: list[MessageJson]
    assistant_history: list[MessageJson]
    summary_text: str
    summary_embedding: tuple[float, ...] | None
    summary_model: str | None
    turn_count: int
    summary_turn_count: int
    compaction_epoch: int
    last_activity_at: datetime
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ChatHit:
    """One chat found by `chat_search`, with the parts of its score."""

    id: UUID
    title: str | None
    summary_text: str
    last_activity_at: datetime
    turn_count: int
    score: float
    semantic: float = 0.0
    text_match: float = 0.0
    recency: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
