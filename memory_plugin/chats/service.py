"""`ChatService`: chats with compaction, summaries, titles and search, over any `ChatStore`.

An append stores the turns first (one atomic statement, so concurrent appends never lose or duplicate a turn),
then compacts the model-visible history if it outgrew the window, then refreshes the chat's summary (and its
embedding, always together) when the chat changed enough. A compaction computed from a stale history is
refused by the store's epoch check and simply recomputed, so compaction is idempotent and safe under races.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ..embeddings.embedder import MemoryEmbedder
from ..errors import EmbeddingError
from .compaction import CompactionPolicy, choose_cut, summary_turn, turn_text
from .idempotency import AppendKey
from .idempotency import request_hash as hash_request
from .rows import ChatHit, ChatRow, MessageJson
from .store import ChatSearch, ChatStore, SummaryUpdate
from .summarizer import ChatSummarizer, ExtractiveSummarizer, key_terms

__all__ = ["ChatMatch", "ChatService", "title_needs_update"]

logger = logging.getLogger("memory_plugin")

TITLE_TERMS = 5
"""Key terms of the summary compared to decide whether the focus moved."""
TITLE_KEEP_OVERLAP = 2
"""The title stays while at least this many of its key terms are still among the summary's current ones."""


def title_needs_update(title: str | None, title_terms: Sequence[str], summary: str) -> bool:
    """Whether a generated title should be (re)written for a chat whose summary is now `summary`.

    A chat without a title gets one. A titled chat keeps its title while at least `TITLE_KEEP_OVERLAP` of the
    `TITLE_TERMS` key terms it was written from are still among the summary's key terms: a chat about
    anodised brackets that adds a delivery date keeps its title; one that moved to invoicing gets a new one.
    """
    if not title:
        return True
    current = set(key_terms(summary, TITLE_TERMS))
    return len(current & set(title_terms)) < TITLE_KEEP_OVERLAP


def to_json(messages: Sequence[ModelMessage]) -> list[MessageJson]:
    """Messages as the JSON stored in the histories."""
    return list(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))


def from_json(messages: Sequence[MessageJson]) -> list[ModelMessage]:
    """Stored JSON back to pydantic-ai messages (pass them as `message_history`)."""
    return ModelMessagesTypeAdapter.validate_python(list(messages))


@dataclass(frozen=True, slots=True)
class ChatMatch:
    """The answer to "go back to the chat about …": one chat, or a short list to confirm, or nothing."""

    chosen: ChatHit | None
    candidates: list[ChatHit] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Tunables:
    summary_chars: int = 600
    title_chars: int = 60
    summary_every: int = 8
    title_min_turns: int = 4
    ambiguity_ratio: float = 0.85


class ChatService:
    """Chats of users on `store`.

    Args:
        store: Where chats live (`PostgresChatStore` under RLS, or `InMemoryChatStore`).
        embedder: Embeds summaries and search queries (a summary is never stored without its embedding).
        summarizer: Writes summaries and titles; default: the offline `ExtractiveSummarizer`.
        policy: The compaction window and tail.
        summary_every: Turns after which the summary is refreshed even without a compaction.
        ambiguity_ratio: A search picks its best chat only when the second scores below this fraction of it;
            otherwise the close matches are returned to confirm.
    """

    def __init__(
        self,
        store: ChatStore,
        embedder: MemoryEmbedder,
        summarizer: ChatSummarizer | None = None,
        *,
        policy: CompactionPolicy | None = None,
        summary_every: int = 8,
        ambiguity_ratio: float = 0.85,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.summarizer: ChatSummarizer = summarizer or ExtractiveSummarizer()
        self.policy = policy or CompactionPolicy()
        self._t = _Tunables(summary_every=summary_every, ambiguity_ratio=ambiguity_ratio)

    async def create(
        self,
        user_id: UUID,
        *,
        title: str | None = None,
        turns: Sequence[ModelMessage] = (),
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> ChatRow:
        """A new chat (with `title` chosen by the user, never replaced, or None to generate one).

        With `idempotency_key` (one per logical create, kept across its retries), a retry after any failure
        creates one chat: if the user has a chat made with the key, it is returned (compacted and summarised if
        the first attempt stopped before) and nothing is created. The same key with another request raises
        `IdempotencyKeyReusedError`. `request_hash` says what "the same request" is (default: a hash of the
        title and the turns' JSON)."""
        messages = to_json(turns)
        key = None
        if idempotency_key is not None:
            key = AppendKey(idempotency_key, request_hash or hash_request({"title": title, "turns": messages}))
        row = await self.store.create(user_id, title, messages, key=key)
        return await self._after_append(user_id, row) if turns else row

    async def get(self, user_id: UUID, chat_id: UUID) -> ChatRow | None:
        """The chat, or None when the user has no such chat."""
        return await self.store.get(user_id, chat_id)

    async def message_history(self, user_id: UUID, chat_id: UUID) -> list[ModelMessage] | None:
        """What the model should see next: pass it as `agent.run(..., message_history=...)`."""
        row = await self.store.get(user_id, chat_id)
        return None if row is None else from_json(row.assistant_history)

    async def list_chats(self, user_id: UUID, *, limit: int = 20, offset: int = 0) -> tuple[list[ChatRow], int]:
        """A page of the user's chats, most recently active first, and their total."""
        return await self.store.list_chats(user_id, limit=limit, offset=offset)

    async def delete(self, user_id: UUID, chat_id: UUID) -> bool:
        """Delete the chat; False when the user has no such chat."""
        return await self.store.delete(user_id, chat_id)

    async def rename(self, user_id: UUID, chat_id: UUID, title: str) -> bool:
        """Give the chat a title of the user's own."""
        return await self.store.rename(user_id, chat_id, title)

    async def append(
        self,
        user_id: UUID,
        chat_id: UUID,
        turns: Sequence[ModelMessage],
        *,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> ChatRow | None:
        """Append turns (e.g. `result.new_messages()`); compacts and re-summarises when needed.

        With `idempotency_key` (one per logical append, kept across its retries), a retry after any failure
        stores the turns once: if the chat already has the key, nothing is appended and the chat is returned
        (compacted and summarised if the first attempt stopped before). The same key with other turns raises
        `IdempotencyKeyReusedError`. `request_hash` says what "the same request" is (default: a hash of the
        turns' JSON, which includes their timestamps: retry with the same message objects)."""
        messages = to_json(turns)
        key = None
        if idempotency_key is not None:
            key = AppendKey(idempotency_key, request_hash or hash_request(messages))
        row = await self.store.append(user_id, chat_id, messages, key=key)
        if row is None:
            return None
        return await self._after_append(user_id, row)

    async def _after_append(self, user_id: UUID, row: ChatRow) -> ChatRow:
        compacted = await self.compact(user_id, row)
        if compacted is not None:
            row = compacted
        stale = row.turn_count - row.summary_turn_count
        if compacted is not None or (not row.summary_text and row.turn_count >= 2) or stale >= self._t.summary_every:
            row = await self.refresh_summary(user_id, row)
        return row

    async def compact(self, user_id: UUID, row: ChatRow) -> ChatRow | None:
        """Compact `row`'s model-visible history if it outgrew the window; the new row, or None if nothing changed.

        A second compaction racing this one is refused by the epoch check; the loser re-reads the chat and
        finds it within the window (or compacts what was appended since), so turns are never lost.
        """
        changed = False
        for _ in range(4):  # each round at least halves the history; 4 rounds cover any batch of appends
            history = from_json(row.assistant_history)
            cut = choose_cut(history, self.policy)
            if cut is None:
                break
            lines = [turn_text(m) for m in history[:cut]]
            text = await self.summarizer.summarize([line for line in lines if line], self._t.summary_chars)
            summary = to_json([summary_turn(text, cut)])[0]
            if await self.store.compact(user_id, row.id, epoch=row.compaction_epoch, drop=cut, summary=summary):
                changed = True
            reread = await self.store.get(user_id, row.id)
            if reread is None:
                return None
            row = reread
        return row if changed else None

    async def refresh_summary(self, user_id: UUID, row: ChatRow) -> ChatRow:
        """Summarise the whole chat (its summary turn stands for what was compacted) and store text + embedding."""
        lines = [line for line in (turn_text(m) for m in from_json(row.assistant_history)) if line]
        if not lines:
            return row
        text = await self.summarizer.summarize(lines, self._t.summary_chars)
        if not text.strip():
            return row
        try:
            [embedding] = await self.embedder.embed_documents([text])
        except EmbeddingError as exc:  # keep the previous summary: text and embedding only travel together
            logger.warning("chat summary not updated, its embedding failed: %s", exc)
            return row
        title = None
        terms: list[str] = []
        if (
            not row.title_is_user
            and row.turn_count >= self._t.title_min_turns
            and title_needs_update(row.title, row.title_terms, text)
        ):
            title = await self.summarizer.title(text, self._t.title_chars)
            terms = key_terms(text, TITLE_TERMS)
        update = SummaryUpdate(
            text=text, embedding=embedding, model=self.embedder.name, turn_count=row.turn_count,
            title=title, title_terms=terms,
        )  # fmt: skip
        await self.store.set_summary(user_id, row.id, update)
        return await self.store.get(user_id, row.id) or row

    async def search(self, user_id: UUID, query: str, *, limit: int = 5) -> list[ChatHit]:
        """The user's chats ranked for `query` (summary embedding, words of title and summary, recency)."""
        try:
            embedding: tuple[float, ...] | None = await self.embedder.embed_query(query)
        except EmbeddingError as exc:  # words and recency still rank
            logger.warning("chat search without embeddings: %s", exc)
            embedding = None
        search = ChatSearch(query, embedding=embedding, model=self.embedder.name, limit=limit)
        return await self.store.search(user_id, search)

    async def find(self, user_id: UUID, query: str) -> ChatMatch:
        """The chat `query` refers to, or the close matches to confirm when several fit about equally."""
        hits = await self.search(user_id, query, limit=5)
        if not hits:
            return ChatMatch(None)
        top = hits[0]
        close = [h for h in hits if h.score >= top.score * self._t.ambiguity_ratio]
        if len(close) == 1:
            return ChatMatch(top, [top])
        return ChatMatch(None, close)
