"""`InMemoryChatStore`: the chat store in RAM, for tests and single-process demos (same contract as Postgres)."""

from __future__ import annotations

import asyncio
import math
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from ..errors import IdempotencyKeyReusedError
from .idempotency import MAX_KEYS_PER_CHAT, REUSED_MESSAGE, AppendKey
from .rows import ChatHit, ChatRow, MessageJson
from .store import ChatSearch, SummaryUpdate

__all__ = ["InMemoryChatStore"]

_WORD = re.compile(r"\w{4,}")


def _words(text: str) -> set[str]:
    plain = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()
    return set(_WORD.findall(plain))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


class InMemoryChatStore:
    """Chats in a dict; one lock makes every operation atomic, as a row update is in Postgres."""

    def __init__(self) -> None:
        self._chats: dict[UUID, ChatRow] = {}
        self._keys: dict[UUID, OrderedDict[str, str]] = {}  # chat -> idempotency key -> request hash, oldest first
        self._created: dict[tuple[UUID, str], tuple[UUID, str]] = {}  # (user, create key) -> (chat, request hash)
        self._lock = asyncio.Lock()

    def _own(self, user_id: UUID, chat_id: UUID) -> ChatRow | None:
        row = self._chats.get(chat_id)
        return row if row is not None and row.user_id == user_id else None

    async def create(
        self, user_id: UUID, title: str | None, turns: Sequence[MessageJson], *, key: AppendKey | None = None
    ) -> ChatRow:
        """A new chat holding `turns` in both histories, once per `key` (see `ChatStore.create`)."""
        if key is not None:
            async with self._lock:
                made = self._created.get((user_id, key.key))
                row = self._own(user_id, made[0]) if made is not None else None
                if made is not None and row is not None:
                    if made[1] != key.request_hash:
                        raise IdempotencyKeyReusedError(REUSED_MESSAGE)
                    return row
        now = datetime.now(UTC)
        row = ChatRow(
            id=uuid4(),
            user_id=user_id,
            title=title,
            title_is_user=title is not None,
            title_terms=(),
            full_history=list(turns),
            assistant_history=list(turns),
            summary_text="",
            summary_embedding=None,
            summary_model=None,
            turn_count=len(turns),
            summary_turn_count=0,
            compaction_epoch=0,
            last_activity_at=now,
            created_at=now,
        )
        async with self._lock:
            self._chats[row.id] = row
            if key is not None:
                self._created[(user_id, key.key)] = (row.id, key.request_hash)
        return row

    async def get(self, user_id: UUID, chat_id: UUID) -> ChatRow | None:
        """The chat, or None."""
        return self._own(user_id, chat_id)

    async def list_chats(self, user_id: UUID, *, limit: int, offset: int) -> tuple[list[ChatRow], int]:
        """A page of the user's chats, most recently active first."""
        mine = [r for r in self._chats.values() if r.user_id == user_id]
        mine.sort(key=lambda r: (r.last_activity_at, str(r.id)), reverse=True)
        return mine[offset : offset + limit], len(mine)

    async def append(
        self, user_id: UUID, chat_id: UUID, turns: Sequence[MessageJson], *, key: AppendKey | None = None
    ) -> ChatRow | None:
        """Append `turns` to both histories, once per `key`."""
        async with self._lock:
            row = self._own(user_id, chat_id)
            if row is None:
                return None
            if key is not None:
                seen = self._keys.setdefault(chat_id, OrderedDict())
                if key.key in seen:
                    if seen[key.key] != key.request_hash:
                        raise IdempotencyKeyReusedError(REUSED_MESSAGE)
                    return row
                seen[key.key] = key.request_hash
                while len(seen) > MAX_KEYS_PER_CHAT:
                    seen.popitem(last=False)
            row = replace(
                row,
                full_history=[*row.full_history, *turns],
                assistant_history=[*row.assistant_history, *turns],
                turn_count=row.turn_count + len(turns),
                last_activity_at=datetime.now(UTC),
            )
            self._chats[chat_id] = row
            return row

    async def compact(self, user_id: UUID, chat_id: UUID, *, epoch: int, drop: int, summary: MessageJson) -> bool:
        """Replace the first `drop` model-visible turns by `summary` if still at `epoch`."""
        async with self._lock:
            row = self._own(user_id, chat_id)
            if row is None or row.compaction_epoch != epoch:
                return False
            history = [summary, *row.assistant_history[drop:]]
            self._chats[chat_id] = replace(row, assistant_history=history, compaction_epoch=epoch + 1)
            return True

    async def set_summary(self, user_id: UUID, chat_id: UUID, update: SummaryUpdate) -> bool:
        """Store a summary unless a newer one is stored."""
        async with self._lock:
            row = self._own(user_id, chat_id)
            if row is None or row.summary_turn_count > update.turn_count:
                return False
            row = replace(
                row,
                summary_text=update.text,
                summary_embedding=update.embedding,
                summary_model=update.model,
                summary_turn_count=update.turn_count,
            )
            if update.title is not None and not row.title_is_user:
                row = replace(row, title=update.title, title_terms=update.title_terms)
            self._chats[chat_id] = row
            return True

    async def rename(self, user_id: UUID, chat_id: UUID, title: str) -> bool:
        """Set a user-chosen title."""
        async with self._lock:
            row = self._own(user_id, chat_id)
            if row is None:
                return False
            self._chats[chat_id] = replace(row, title=title, title_is_user=True)
            return True

    async def delete(self, user_id: UUID, chat_id: UUID) -> bool:
        """Delete the chat."""
        async with self._lock:
            if self._own(user_id, chat_id) is None:
                return False
            del self._chats[chat_id]
            self._keys.pop(chat_id, None)
            self._created = {k: v for k, v in self._created.items() if v[0] != chat_id}
            return True

    async def search(self, user_id: UUID, search: ChatSearch) -> list[ChatHit]:
        """The same weighted sum as `public.chat_search` (word overlap stands in for `ts_rank_cd`)."""
        now = search.now or datetime.now(UTC)
        query_words = _words(search.query)
        hits = []
        for row in self._chats.values():
            if row.user_id != user_id:
                continue
            semantic = 0.0
            if search.embedding is not None and row.summary_embedding is not None and row.summary_model == search.model:
                semantic = max(0.0, _cosine(search.embedding, row.summary_embedding))
            words = _words(f"{row.title or ''} {row.summary_text}")
            text = len(query_words & words) / (len(query_words) + 1) if query_words else 0.0
            age_days = max(0.0, (now - row.last_activity_at).total_seconds() / 86400)
            recency = 0.5 ** (age_days / max(search.half_life_days, 0.001))
            if semantic <= 0 and text <= 0:
                continue
            score = 0.5 * semantic + 0.4 * text + 0.1 * recency
            hits.append(
                ChatHit(
                    row.id,
                    row.title,
                    row.summary_text,
                    row.last_activity_at,
                    row.turn_count,
                    score,
                    semantic,
                    text,
                    recency,
                )
            )
        hits.sort(key=lambda h: (-h.score, -h.last_activity_at.timestamp(), str(h.id)))
        return hits[: search.limit]

    async def close(self) -> None:
        """Nothing to release."""
