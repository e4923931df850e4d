"""`InMemoryStore`: the long-term store in a Python dict.

For unit tests and as the fallback while Postgres is unreachable. Applies the same merge rules as
`public.memory_upsert_items` and the same ranking as `public.memory_context`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from ..ranking import fact_score
from ..retrieval.scored import ScoredMemory
from ..retrieval.search import BacklogItem, EmbeddingUpdate, SearchQuery, score_in_python
from .base import ContextQuery
from .records import MemoryItem, MemoryKind, MemoryRecord, is_single_valued

__all__ = ["InMemoryStore"]

_MAX_PROVENANCE = 50
_MAX_PREFERENCES = 100


class InMemoryStore:
    """A `LongTermStore` that keeps everything in RAM (lost on exit)."""

    def __init__(self) -> None:
        self._rows: dict[UUID, dict[str, MemoryRecord]] = {}
        self._applied_writes: set[UUID] = set()  # as public.memory_applied_writes
        # As public.memory_search_docs: row id -> (model, vector), with the text it was computed from.
        self._embeddings: dict[UUID, tuple[str, tuple[float, ...], str]] = {}
        self._lock = asyncio.Lock()

    @property
    def backend_name(self) -> str:
        """Always "memory"."""
        return "memory"

    async def upsert(
        self, user_id: UUID, items: Sequence[MemoryItem], *, reinforcement_step: float, write_id: UUID | None = None
    ) -> list[MemoryRecord]:
        """Insert or reinforce, as `public.memory_upsert_items` does (a known `write_id` changes nothing)."""
        async with self._lock:
            rows = self._rows.setdefault(user_id, {})
            if write_id is not None:
                if write_id in self._applied_writes:
                    return [rows[i.content_hash] for i in items if i.content_hash in rows]
                self._applied_writes.add(write_id)
            now = datetime.now(UTC)
            out: list[MemoryRecord] = []
            for item in items:
                existing = rows.get(item.content_hash)
                record = (
                    self._insert(user_id, item, now)
                    if existing is None
                    else self._merge(existing, item, now, reinforcement_step)
                )
                rows[item.content_hash] = record
                if item.kind == "fact" and item.embedding is not None and item.embedding_model is not None:
                    self._embeddings[record.id] = (item.embedding_model, item.embedding, record.content)
                out.append(record)
            return out

    @staticmethod
    def _insert(user_id: UUID, item: MemoryItem, now: datetime) -> MemoryRecord:
        learned_at = item.occurred_at or now
        return MemoryRecord(
            id=uuid4(),
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
        )

    @staticmethod
    def _merge(old: MemoryRecord, item: MemoryItem, now: datetime, step: float) -> MemoryRecord:
        changed = is_single_valued(old) and old.content.lower() != item.content.lower()
        same = not changed
        ids = old.source_message_ids + tuple(i for i in item.source_message_ids if i not in old.source_message_ids)
        return replace(
            old,
            content=item.content if is_single_valued(old) else old.content,
            confidence=min(1.0, max(old.confidence, item.confidence) + step) if same else item.confidence,
            relevance_count=old.relevance_count + 1 if same else 0,
            importance=max(old.importance, item.importance) if same else item.importance,
            source="explicit" if "explicit" in (old.source, item.source) else "inferred",
            source_message_ids=ids[-_MAX_PROVENANCE:],
            session_id=item.session_id or old.session_id,
            attributes={**old.attributes, **item.attributes},
            updated_at=now,
            last_reinforced_at=max(old.last_reinforced_at, item.occurred_at or now),
            occurred_at=min((t for t in (old.occurred_at, item.occurred_at) if t is not None), default=None),
            expires_at=None
            if old.expires_at is None or item.expires_at is None
            else max(old.expires_at, item.expires_at),
            metadata={**old.metadata, **item.metadata},
            # Stated again: it holds again.
            invalid_at=None,
            superseded_by=None,
            archived_at=None,
        )

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """Same selection and order as `public.memory_context`."""
        now = query.now or datetime.now(UTC)
        rows = [r for r in self._rows.get(user_id, {}).values() if r.is_current(now)]

        def of(kind: MemoryKind) -> list[MemoryRecord]:
            return [r for r in rows if r.kind == kind]

        facts = sorted(
            of("fact"),
            key=lambda r: (
                -fact_score(
                    importance=r.importance,
                    confidence=r.confidence,
                    last_reinforced_at=r.last_reinforced_at,
                    now=now,
                    weights=query.weights,
                ),
                -r.last_reinforced_at.timestamp(),
                str(r.id),
            ),
        )[: query.max_facts]
        prefs = sorted(of("preference"), key=lambda r: (-r.last_reinforced_at.timestamp(), str(r.id)))[
            :_MAX_PREFERENCES
        ]
        projects = sorted(of("project"), key=lambda r: (-r.created_at.timestamp(), str(r.id)))[: query.max_projects]
        patterns = sorted(
            of("pattern"), key=lambda r: (-r.relevance_count, -r.last_reinforced_at.timestamp(), str(r.id))
        )[: query.max_patterns]
        return facts + prefs + projects + patterns

    async def list_records(
        self, user_id: UUID, *, kind: MemoryKind | None = None, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The user's rows, newest first."""
        rows = [r for r in self._rows.get(user_id, {}).values() if kind is None or r.kind == kind]
        return sorted(rows, key=lambda r: r.created_at, reverse=True)[:limit]

    async def search_text(self, user_id: UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """Rows containing `text`, ignoring case (as SQL `ilike`)."""
        needle = text.strip().casefold()
        rows = [r for r in self._rows.get(user_id, {}).values() if needle in r.content.casefold()]
        return sorted(rows, key=lambda r: (-r.importance, -r.confidence, -r.last_reinforced_at.timestamp()))[:limit]

    async def search(self, user_id: UUID, query: SearchQuery) -> list[ScoredMemory]:
        """The ranking of `public.memory_search` with simpler text signals (see `retrieval/search.py`), over
        every fact of the user: fine for tests and small users, linear in the history."""
        rows = list(self._rows.get(user_id, {}).values())
        vectors = {rid: (model, vector) for rid, (model, vector, _) in self._embeddings.items()}
        return score_in_python(rows, query, vectors)

    async def set_embeddings(self, user_id: UUID, model: str, items: Sequence[EmbeddingUpdate]) -> int:
        """Vectors by content_hash, ignoring one computed from a text the fact no longer has."""
        async with self._lock:
            rows = self._rows.get(user_id, {})
            stored = 0
            for item in items:
                record = rows.get(item.content_hash)
                if record is not None and record.kind == "fact" and record.content == item.content:
                    self._embeddings[record.id] = (model, item.embedding, record.content)
                    stored += 1
            return stored

    async def embedding_backlog(self, user_id: UUID, model: str, *, limit: int = 1000) -> list[BacklogItem]:
        """Facts without a vector of `model`, in insertion order."""
        backlog = [
            BacklogItem(r.id, r.content_hash, r.content)
            for r in self._rows.get(user_id, {}).values()
            if r.kind == "fact" and self._embeddings.get(r.id, ("",))[0] != model
        ]
        return backlog[:limit]

    async def delete(self, user_id: UUID, record_id: UUID) -> bool:
        """Delete one row of the user."""
        async with self._lock:
            rows = self._rows.get(user_id, {})
            for key, record in rows.items():
                if record.id == record_id:
                    del rows[key]
                    self._embeddings.pop(record_id, None)
                    return True
            return False

    async def ping(self) -> bool:
        """Always reachable."""
        return True

    async def close(self) -> None:
        """Nothing to release."""
