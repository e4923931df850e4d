"""`SealedStore`: the one boundary where sensitive facts are sealed on the way in and opened on the way out.

It wraps any `LongTermStore` (the manager's `ResilientStore` around Postgres, or a store passed in), so every
face (Python API, REST API, dashboard, tools, extraction) reads and writes through it, and everything under it
holds ciphertext: the table, the outage journal on disk, the outage cache, the applied-write records.

An item is sealed when it is marked (`MemoryItem.sensitive`) or is a fact of one of `sensitive_categories`
(only while keys are configured). A sealed item loses what would repeat its text elsewhere: its
`content_hash` becomes an HMAC (`crypto.sealed_hash`), and its slot, near-duplicate keys and embedding are
dropped, so the database makes no search row, no vector and no trigram key of it (the search-row trigger skips
rows with a `key_id`). What it loses, and why, is in docs/privacy.md.

Reads open sealed rows with the key ring. A row that does not open (its key is not configured, or it was
altered) raises `EncryptionKeyError` for the owner's views (lists, history, writes), and is left out of what
the agent is shown (`context`, `read_context`, `peek_context`) with a warning: one unreadable row never breaks a
turn, and never reaches a prompt as ciphertext.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..crypto import KeyRing, is_sealed, open_text, seal_text, sealed_hash, sealed_key_id
from ..crypto.envelope import max_sealed_bytes
from ..errors import EncryptionKeyError, InvalidMemoryInputError
from ..logs import LOG_PREFIX, logger
from ..quality.rules import WriteRules
from ..rows import CONTENT_MAX_CHARS, MemoryItem, MemoryKind, MemoryRecord
from ..settings import MemorySettings
from .base import DEFAULT_WRITE_RULES, ContextQuery, ContextRead, LongTermStore
from .status import BackendStatus

if TYPE_CHECKING:
    from ..retrieval import BacklogItem, EmbeddingUpdate, ScoredMemory, SearchQuery

__all__ = ["SealedStore", "sealed_if_keys"]


def sealed_if_keys(store: LongTermStore, settings: MemorySettings) -> LongTermStore:
    """`store` behind a `SealedStore` when `settings` has encryption keys; `store` itself without (the write
    path then refuses items marked sensitive, and reads refuse rows still sealed: `conversions.refuse_sealed`),
    or when it seals already."""
    ring = settings.key_ring()
    if ring is None or getattr(store, "seals_sensitive", False):
        return store
    return SealedStore(store, ring, settings.sensitive_categories)


class SealedStore:
    """A `LongTermStore` that seals sensitive items before `wrapped` stores them and opens them after it reads.

    `SealedStore(store, settings.key_ring(), settings.sensitive_categories)`; without a key ring nothing is
    sealed and an item marked sensitive is refused (`EncryptionKeyError`), so a caller who asked for
    encryption never gets plain text at rest. Every other attribute is the wrapped store's.
    """

    seals_sensitive = True
    """A capability flag (no `isinstance` on a wrapper): writers may hand this store items marked sensitive."""

    def __init__(self, wrapped: LongTermStore, ring: KeyRing | None, sensitive_categories: Collection[str]) -> None:
        self.wrapped = wrapped
        """The store that holds the sealed rows."""
        self.ring = ring
        """The keys rows are sealed and opened with (None: encryption off)."""
        self.sensitive_categories = frozenset(sensitive_categories)
        """Fact categories sealed whatever the writer says (only while `ring` is set)."""
        self.unreadable_rows = 0
        """Sealed rows left out of a context because they did not open (each one logged)."""

    def __getattr__(self, name: str) -> Any:
        # Only called for names this class does not define: the wrapped store's own extras (a pool, a journal).
        return getattr(self.wrapped, name)

    # --- sealing and opening ----------------------------------------------------------------------------------
    def _should_seal(self, item: MemoryItem) -> bool:
        return item.sensitive or (
            self.ring is not None and item.kind == "fact" and item.category in self.sensitive_categories
        )

    def _seal(self, user_id: UUID, item: MemoryItem) -> MemoryItem:
        if not self._should_seal(item):
            if is_sealed(item.content):
                raise InvalidMemoryInputError(
                    "a memory may not start with 'sealed:v1:' (the marker of encrypted rows): reword it"
                )
            return item
        if self.ring is None:
            raise EncryptionKeyError(
                "a memory marked sensitive cannot be stored without encryption keys: set MEMORY_ENCRYPTION_KEYS"
                " and MEMORY_ENCRYPTION_HASH_KEY (docs/privacy.md), or store it without sensitive=True"
            )
        sealed = seal_text(self.ring, item.content, user_id=user_id, kind=item.kind, category=item.category)
        if len(sealed) > CONTENT_MAX_CHARS:
            limit = max_sealed_bytes(CONTENT_MAX_CHARS, self.ring.active)
            raise InvalidMemoryInputError(
                f"a sensitive memory is stored encrypted, which holds at most {limit:,} bytes of UTF-8 text; this"
                f" one is {len(item.content.encode('utf-8')):,}: shorten it"
            )
        return replace(
            item,
            content=sealed,
            content_hash=sealed_hash(self.ring, user_id, item.content_hash),
            slot=None,
            match_key=None,
            match_guard=None,
            match_words=None,
            embedding=None,
            embedding_model=None,
            sensitive=True,
        )

    def _open(self, record: MemoryRecord) -> MemoryRecord:
        if not is_sealed(record.content):
            return record
        plain = open_text(self.ring, record.content, user_id=record.user_id, kind=record.kind, category=record.category)
        return replace(record, content=plain, key_id=sealed_key_id(record.content))

    def _open_all(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        return [self._open(r) for r in records]

    def _open_shown(self, user_id: UUID, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """The records the agent is shown: a row that does not open is left out and logged, never raised."""
        opened: list[MemoryRecord] = []
        failures: list[str] = []
        for record in records:
            try:
                opened.append(self._open(record))
            except EncryptionKeyError as exc:
                failures.append(str(exc))
        if failures:
            self.unreadable_rows += len(failures)
            logger.warning(
                "%s %d sealed memory row(s) of user %s left out of the context: %s",
                LOG_PREFIX,
                len(failures),
                user_id,
                failures[0],
            )
        return opened

    def _reseal(self, record: MemoryRecord) -> MemoryRecord:
        """A record opened here, sealed again (for the outage copy, which holds what the table holds)."""
        if record.key_id is None or is_sealed(record.content) or self.ring is None:
            return record
        content = seal_text(
            self.ring, record.content, user_id=record.user_id, kind=record.kind, category=record.category
        )
        return replace(record, content=content, key_id=self.ring.active)

    # --- the store contract -----------------------------------------------------------------------------------
    @property
    def backend_name(self) -> str:
        """The wrapped store's name."""
        return self.wrapped.backend_name

    async def upsert(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        rules: WriteRules = DEFAULT_WRITE_RULES,
        *,
        write_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        """Seal what must be sealed, write, and return the rows opened, each written row with its item's own
        (plain) `content_hash`, which the writer matches rows to items by."""
        sealed = [self._seal(user_id, item) for item in items]
        plain_hash = {s.content_hash: i.content_hash for s, i in zip(sealed, items, strict=True) if s is not i}
        records = await self.wrapped.upsert(user_id, sealed, rules, write_id=write_id)
        return [
            replace(r, content_hash=plain_hash.get(r.content_hash, r.content_hash)) for r in self._open_all(records)
        ]

    async def set_aside(
        self, user_id: UUID, items: Sequence[MemoryItem], rules: WriteRules, *, write_id: UUID, reason: str
    ) -> bool:
        """Seal what must be sealed, then let the wrapped store keep it (its journal holds sealed text only)."""
        sealed = [self._seal(user_id, item) for item in items]
        return await self.wrapped.set_aside(user_id, sealed, rules, write_id=write_id, reason=reason)

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """The wrapped context, opened; unreadable sealed rows left out (logged)."""
        return self._open_shown(user_id, await self.wrapped.context(user_id, query))

    async def read_context(self, user_id: UUID, query: ContextQuery) -> ContextRead:
        """The wrapped read, opened; unreadable sealed rows left out (logged)."""
        read = await self.wrapped.read_context(user_id, query)
        return replace(read, records=self._open_shown(user_id, read.records))

    async def peek_context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """The wrapped peek, opened; unreadable sealed rows left out (logged)."""
        return self._open_shown(user_id, await self.wrapped.peek_context(user_id, query))

    def cache_shown_facts(self, user_id: UUID, facts: Sequence[MemoryRecord]) -> None:
        """The outage copy keeps sealed rows sealed."""
        self.wrapped.cache_shown_facts(user_id, [self._reseal(f) for f in facts])

    async def fact_history(
        self, user_id: UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The wrapped history, opened (`EncryptionKeyError` for a row that does not open)."""
        return self._open_all(
            await self.wrapped.fact_history(user_id, at=at, include_invalid=include_invalid, limit=limit)
        )

    async def list_records(
        self, user_id: UUID, *, kind: MemoryKind | None = None, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The wrapped rows, opened (`EncryptionKeyError` for a row that does not open)."""
        return self._open_all(await self.wrapped.list_records(user_id, kind=kind, limit=limit))

    async def search_text(self, user_id: UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """The wrapped text search without sealed rows (their stored text is ciphertext: a match would be on it)."""
        return [r for r in await self.wrapped.search_text(user_id, text, limit=limit) if not is_sealed(r.content)]

    async def search(self, user_id: UUID, query: SearchQuery) -> list[ScoredMemory]:
        """The wrapped search (sealed facts have no search row, so it never finds them), opened."""
        found = await self.wrapped.search(user_id, query)
        return [replace(s, memory=self._open(s.memory)) for s in found]

    async def set_embeddings(self, user_id: UUID, model: str, items: Sequence[EmbeddingUpdate]) -> int:
        """Passed through (a sealed fact has no search row, so no vector lands on it)."""
        return await self.wrapped.set_embeddings(user_id, model, items)

    async def embedding_backlog(self, user_id: UUID, model: str, *, limit: int = 1000) -> list[BacklogItem]:
        """Passed through (sealed facts are never in it)."""
        return await self.wrapped.embedding_backlog(user_id, model, limit=limit)

    async def delete(self, user_id: UUID, record_id: UUID) -> bool:
        """Passed through."""
        return await self.wrapped.delete(user_id, record_id)

    async def count_facts(self, user_id: UUID) -> int:
        """Passed through."""
        return await self.wrapped.count_facts(user_id)

    async def ping(self) -> bool:
        """Passed through."""
        return await self.wrapped.ping()

    async def close(self) -> None:
        """Passed through."""
        await self.wrapped.close()

    async def start(self) -> None:
        """Passed through."""
        await self.wrapped.start()

    async def status(self, *, require_primary: bool = False) -> BackendStatus:
        """Passed through."""
        return await self.wrapped.status(require_primary=require_primary)
