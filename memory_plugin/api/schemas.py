"""Request and response bodies of the REST API (what the OpenAPI schema shows)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChatCreate", "ChatOut", "ChatPage", "ChatPatch", "ChatPatchOut", "ChatSearchResult", "ChatSummaryOut", "ErrorBody",
    "ErrorDetail", "RecordOut", "SimpleTurn",
]  # fmt: skip

MAX_TURNS_PER_REQUEST = 200
"""Turns one request may append (a whole long tool exchange fits; a bulk import goes in several requests)."""
MAX_TURN_CHARS = 20_000
"""Longest plain-text turn, as `MEMORY_MAX_MESSAGE_CHARS`' default."""


class SimpleTurn(BaseModel):
    """A plain-text turn; richer turns (tool calls, files) are sent as pydantic-ai message JSON instead."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=MAX_TURN_CHARS)


Turn = SimpleTurn | dict[str, Any]


class ChatCreate(BaseModel):
    """A new chat: an optional title of the user's own (never replaced by a generated one) and first turns."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, min_length=1, max_length=200)
    turns: list[Turn] = Field(default_factory=list, max_length=MAX_TURNS_PER_REQUEST)


class ChatPatch(BaseModel):
    """Turns to append (compaction runs when needed) and/or a new title chosen by the user."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, min_length=1, max_length=200)
    turns: list[Turn] = Field(default_factory=list, max_length=MAX_TURNS_PER_REQUEST)


class ChatSummaryOut(BaseModel):
    """A chat without its histories (lists and search results)."""

    id: UUID
    title: str | None
    summary_text: str
    turn_count: int
    last_activity_at: datetime


class ChatOut(ChatSummaryOut):
    """A chat with both histories as pydantic-ai message JSON."""

    created_at: datetime
    full_history: list[dict[str, Any]]
    assistant_history: list[dict[str, Any]]


class ChatPatchOut(ChatSummaryOut):
    """What a `PATCH` changed: the chat's summary fields and title as they are now, the turns it appended, and the
    size of the model-visible history. Bounded by the request (at most `MAX_TURNS_PER_REQUEST` turns), never the
    whole chat: `GET /api/chats/{id}` reads the histories."""

    created_at: datetime
    appended: list[dict[str, Any]]
    """The turns this request appended, as stored (pydantic-ai message JSON); on a retry with the same
    `Idempotency-Key`, the turns the first attempt stored. Empty for a rename."""
    assistant_turn_count: int
    """Messages in the model-visible history after compaction."""


class ChatPage(BaseModel):
    """A page of the user's chats, most recently active first."""

    items: list[ChatSummaryOut]
    total: int
    limit: int
    offset: int


class ChatSearchResult(BaseModel):
    """Chats matching `?search=`: `chosen` when one clearly fits, else `candidates` to confirm."""

    chosen: ChatSummaryOut | None
    candidates: list[ChatSummaryOut]


class RecordOut(BaseModel):
    """One stored memory item of the user."""

    id: UUID
    kind: str
    category: str
    content: str
    confidence: float
    importance: int
    created_at: datetime
    sensitive: bool = False
    """Stored encrypted (shown here in plain text to its owner only; never found by search)."""


class ErrorDetail(BaseModel):
    """What went wrong, for a program (`code`) and for a person (`message`)."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error response has this body."""

    error: ErrorDetail


class MemorySwitchIn(BaseModel):
    """Pause or resume the user's memory."""

    model_config = ConfigDict(extra="forbid")

    paused: bool


class MemorySwitch(BaseModel):
    """The user's memory switch, and the notice the application shows about memory."""

    paused: bool
    notice: str
