"""`ChatStore`: what the chat service needs from a backend (Postgres under RLS, or RAM for tests)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol
from uuid import UUID

from .idempotency import AppendKey
from .rows import ChatHit, ChatRow, MessageJson

__all__ = ["ChatSearch", "ChatStore", "SummaryUpdate"]


class SummaryUpdate:
    """A new chat summary (and possibly title), valid for the first `turn_count` turns."""

    __slots__ = ("embedding", "model", "text", "title", "title_terms", "turn_count")

    def __init__(
        self,
        *,
        text: str,
        embedding: Sequence[float],
        model: str,
        turn_count: int,
        title: str | None = None,
        title_terms: Sequence[str] = (),
    ) -> None:
        self.text = text
        self.embedding = tuple(embedding)
        self.model = model
        self.turn_count = turn_count
        self.title = title
        self.title_terms = tuple(title_terms)


class ChatSearch:
    """A ranked search over one user's chats."""

    __slots__ = ("embedding", "half_life_days", "limit", "model", "now", "query")

    def __init__(
        self,
        query: str,
        *,
        embedding: Sequence[float] | None = None,
        model: str | None = None,
        limit: int = 5,
        half_life_days: float = 30.0,
        now: datetime | None = None,
    ) -> None:
        self.query = query
        self.embedding = tuple(embedding) if embedding is not None else None
        self.model = model
        self.limit = limit
        self.half_life_days = half_life_days
        self.now = now


class ChatStore(Protocol):
    """Chats of each user. Every method sees only `user_id`'s chats; a chat of someone else is "not found"."""

    async def create(
        self, user_id: UUID, title: str | None, turns: Sequence[MessageJson], *, key: AppendKey | None = None
    ) -> ChatRow:
        """A new chat holding `turns` in both histories. With a `key` the user already created a chat with (and
        the chat still exists), nothing is created: the same request returns that chat as it is, another raises
        `IdempotencyKeyReusedError`. The key is stored with the chat, in the same statement."""
        ...

    async def get(self, user_id: UUID, chat_id: UUID) -> ChatRow | None:
        """The chat, or None when it does not exist for this user."""
        ...

    async def list_chats(self, user_id: UUID, *, limit: int, offset: int) -> tuple[list[ChatRow], int]:
        """A page of the user's chats, most recently active first, and the user's total number of chats."""
        ...

    async def append(
        self, user_id: UUID, chat_id: UUID, turns: Sequence[MessageJson], *, key: AppendKey | None = None
    ) -> ChatRow | None:
        """Append `turns` to both histories atomically (concurrent appends all land, in some order). With a
        `key` the chat has seen (among its newest `MAX_KEYS_PER_CHAT`), nothing is appended: the same request
        returns the chat as it is, another raises `IdempotencyKeyReusedError`. The key is stored in the same
        transaction as the turns."""
        ...

    async def compact(self, user_id: UUID, chat_id: UUID, *, epoch: int, drop: int, summary: MessageJson) -> bool:
        """Replace the first `drop` turns of `assistant_history` by `summary` if the chat is still at compaction
        `epoch` (turns appended since are kept). False when another compaction got there first."""
        ...

    async def set_summary(self, user_id: UUID, chat_id: UUID, update: SummaryUpdate) -> bool:
        """Store a summary unless a summary of more turns is already stored."""
        ...

    async def rename(self, user_id: UUID, chat_id: UUID, title: str) -> bool:
        """Set a title chosen by the user (generated titles never replace it)."""
        ...

    async def delete(self, user_id: UUID, chat_id: UUID) -> bool:
        """Delete the chat; False when there was none."""
        ...

    async def search(self, user_id: UUID, search: ChatSearch) -> list[ChatHit]:
        """The user's chats ranked by summary embedding, words of title and summary, and recency."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
