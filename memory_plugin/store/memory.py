"""`InMemoryStore`: the long-term store in a Python dict.

For unit tests and as the fallback while Postgres is unreachable. Applies the same merge rules as
`public.memory_upsert_items` (exact and near-duplicate reinforcement, `replaces`, slots) and the same ranking
as `public.memory_context` (decayed confidence, rejections apart), with the functions of `../quality/`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from ..quality.decay import decayed_confidence
from ..quality.matching import is_near_duplicate, trigram_similarity
from ..quality.rules import WriteRules
from ..quality.semantic import cosine_similarity
from ..ranking import fact_score
from ..retrieval.scored import ScoredMemory
from ..retrieval.search import BacklogItem, EmbeddingUpdate, SearchQuery, StoredVector, score_in_python
from ..rows import MemoryItem, MemoryKind, MemoryRecord, is_single_valued
from .base import DEFAULT_WRITE_RULES, ContextQuery, StoreBase

__all__ = ["InMemoryStore"]

_MAX_PROVENANCE = 50
_MAX_PREFERENCES = 100


class InMemoryStore(StoreBase):
    """A `LongTermStore` that keeps everything in RAM (lost on exit)."""

    def __init__(self) -> None:
        self._rows: dict[UUID, dict[str, MemoryRecord]] = {}
        # As memory_private.memory_applied_writes: (user, write id) -> record ids; write ids are per user.
        self._applied_writes: dict[tuple[UUID, UUID], list[UUID]] = {}
        # As public.memory_search_docs: row id -> (model, vector, the text it was computed from).
        self._embeddings: dict[UUID, StoredVector] = {}
        self._lock = asyncio.Lock()

    @property
    def backend_name(self) -> str:
        """Always "memory"."""
        return "memory"

    async def upsert(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        rules: WriteRules = DEFAULT_WRITE_RULES,
        *,
        write_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        """Insert or reinforce, as `public.memory_upsert_items` does (a known `write_id` changes nothing)."""
        async with self._lock:
            rows = self._rows.setdefault(user_id, {})
            if write_id is not None and (user_id, write_id) in self._applied_writes:
                by_id = {r.id: r for r in rows.values()}
                return [by_id[i] for i in self._applied_writes[user_id, write_id] if i in by_id]
            now = datetime.now(UTC)
            # 1. Each item's target row: same hash, else the most similar current near-duplicate, else new.
            groups: dict[str, list[tuple[int, MemoryItem]]] = {}
            for ord_, item in enumerate(items):
                target = item.content_hash
                if target not in rows:
                    match = self._similar_by_embedding(rows, item, now, rules.embedding_threshold)
                    if match is None:
                        match = self._near_duplicate(rows, item, now, rules.near_duplicate_threshold)
                    target = match.content_hash if match is not None else target
                groups.setdefault(target, []).append((ord_, item))
            # Written in the order of each group's representative item, as the SQL returns them.
            folded = sorted((_representative(target, group)[0], target, group) for target, group in groups.items())
            written: list[MemoryRecord] = []
            replacing: list[tuple[UUID, MemoryRecord]] = []
            for _, target, group in folded:
                item = _fold(target, [i for _, i in group])
                existing = rows.get(target)
                record = (
                    MemoryRecord.inserted(user_id, item, record_id=uuid4(), now=now)
                    if existing is None
                    else self._merge(existing, item, now, rules.reinforcement_step)
                )
                rows[target] = record
                written.append(record)
                # Its vector, unless the item merged into a fact worded otherwise (that one keeps its own).
                if (
                    item.kind == "fact"
                    and item.embedding is not None
                    and item.embedding_model is not None
                    and record.content == item.content
                ):
                    self._embeddings[record.id] = StoredVector(item.embedding_model, item.embedding, record.content)
                if item.replaces is not None and item.replaces != record.id:
                    replacing.append((item.replaces, record))
            written_ids = {r.id for r in written}
            # 2. `replaces`: the named current facts of this user, other than the rows just written.
            gone: list[MemoryRecord] = []
            by_id = {r.id: r for r in rows.values()}
            # Several items naming one fact: the last one said replaces it, as in SQL.
            for old_id, new in dict(replacing).items():
                old = by_id.get(old_id)
                if (
                    old is not None
                    and old.kind == "fact"
                    and old.invalid_at is None
                    and old.archived_at is None
                    and old.id not in written_ids
                ):
                    gone.append(self._supersede(rows, old, new))
                    by_id[old.id] = gone[-1]
            # 3. Slots: the latest stated current fact of each slot written stays; the others are superseded.
            slots = {r.slot for r in written if r.kind == "fact" and r.slot is not None}
            for slot in sorted(slots):
                current = [r for r in rows.values() if r.kind == "fact" and r.slot == slot and r.is_current(now)]
                winner = min(
                    current, key=lambda r: (-r.last_reinforced_at.timestamp(), r.id not in written_ids, str(r.id))
                )
                gone.extend(self._supersede(rows, r, winner) for r in current if r.id != winner.id)
            # As they are now: one may have been superseded by a later item of this write (its hash renamed).
            now_by_id = {r.id: r for r in rows.values()}
            written = [now_by_id[r.id] for r in written]
            if write_id is not None:
                self._applied_writes[user_id, write_id] = [r.id for r in written + gone]
            return written + gone

    def _similar_by_embedding(
        self, rows: dict[str, MemoryRecord], item: MemoryItem, now: datetime, threshold: float
    ) -> MemoryRecord | None:
        """The current fact `item` repeats by meaning, as `memory_upsert_embedded` picks it: same category,
        guard and embedding model, cosine similarity at least `threshold`, the most similar first
        (`quality/semantic.py`)."""
        if (
            item.kind != "fact"
            or item.embedding is None
            or item.embedding_model is None
            or item.match_guard is None
            or threshold > 1
        ):
            return None
        best: tuple[float, float, str, MemoryRecord] | None = None
        for r in rows.values():
            stored = self._embeddings.get(r.id)
            if (
                stored is None
                or not _has_vector(stored, item.embedding_model, r.content)
                or r.kind != "fact"
                or r.category != item.category
                or r.match_guard != item.match_guard
                or r.id == item.replaces
                or not r.is_current(now)
            ):
                continue
            similarity = cosine_similarity(stored.vector, item.embedding)
            if similarity >= threshold:
                key = (-similarity, -r.last_reinforced_at.timestamp(), str(r.id))
                if best is None or key < best[:3]:
                    best = (*key, r)
        return best[3] if best is not None else None

    @staticmethod
    def _near_duplicate(
        rows: dict[str, MemoryRecord], item: MemoryItem, now: datetime, threshold: float
    ) -> MemoryRecord | None:
        """The current fact `item` nearly duplicates, as `memory_upsert_items` picks it (most similar first)."""
        if (
            item.kind != "fact"
            or item.match_key is None
            or item.match_guard is None
            or item.match_words is None
            or threshold > 1
        ):
            return None
        mine = (item.match_key, item.match_guard, item.match_words)
        best: tuple[float, float, str, MemoryRecord] | None = None
        for r in rows.values():
            if (
                r.kind == "fact"
                and r.category == item.category
                and r.is_current(now)
                and r.match_key is not None
                and r.match_guard is not None
                and r.match_words is not None
                # A fact the item says it replaces is a change, never a rewording of it.
                and r.id != item.replaces
                and is_near_duplicate((r.match_key, r.match_guard, r.match_words), mine, threshold)
            ):
                key = (-trigram_similarity(r.match_key, item.match_key), -r.last_reinforced_at.timestamp(), str(r.id))
                if best is None or key < best[:3]:
                    best = (*key, r)
        return best[3] if best is not None else None

    @staticmethod
    def _supersede(rows: dict[str, MemoryRecord], old: MemoryRecord, new: MemoryRecord) -> MemoryRecord:
        """Mark `old` as replaced by `new`, freeing its content hash (as the SQL does)."""
        del rows[old.content_hash]
        moved = replace(
            old,
            invalid_at=max(old.created_at, new.last_reinforced_at),
            superseded_by=new.id,
            content_hash=f"{old.content_hash}:superseded:{old.id}",
            updated_at=datetime.now(UTC),
        )
        rows[moved.content_hash] = moved
        return moved

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
            slot=old.slot or item.slot,
            match_key=item.match_key if old.match_guard is None else old.match_key,
            match_guard=old.match_guard or item.match_guard,
            match_words=item.match_words if old.match_words is None else old.match_words,
        )

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """Same selection and order as `public.memory_context`."""
        now = query.now or datetime.now(UTC)
        rows = [r for r in self._rows.get(user_id, {}).values() if r.is_current(now)]

        def of(kind: MemoryKind) -> list[MemoryRecord]:
            return [r for r in rows if r.kind == kind]

        decay = query.decay
        rankable = [
            r
            for r in of("fact")
            if r.category != "rejection"
            and decayed_confidence(r.confidence, r.last_reinforced_at, r.category, now, decay) >= decay.floor
        ]
        facts = sorted(
            rankable,
            key=lambda r: (
                -fact_score(
                    importance=r.importance,
                    confidence=r.confidence,
                    last_reinforced_at=r.last_reinforced_at,
                    now=now,
                    weights=query.weights,
                    category=r.category,
                    decay=decay,
                ),
                -r.last_reinforced_at.timestamp(),
                str(r.id),
            ),
        )[: query.max_facts]
        rejections = sorted(
            (r for r in of("fact") if r.category == "rejection"),
            key=lambda r: (-r.last_reinforced_at.timestamp(), str(r.id)),
        )[: query.max_rejections]
        prefs = sorted(of("preference"), key=lambda r: (-r.last_reinforced_at.timestamp(), str(r.id)))[
            :_MAX_PREFERENCES
        ]
        projects = sorted(of("project"), key=lambda r: (-r.created_at.timestamp(), str(r.id)))[: query.max_projects]
        patterns = sorted(
            of("pattern"), key=lambda r: (-r.relevance_count, -r.last_reinforced_at.timestamp(), str(r.id))
        )[: query.max_patterns]
        return facts + rejections + prefs + projects + patterns

    async def fact_history(
        self, user_id: UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemoryRecord]:
        """As `public.memory_fact_history`: facts valid at `at` (or all), newest first."""
        rows = [
            r
            for r in self._rows.get(user_id, {}).values()
            if r.kind == "fact"
            and (
                at is None
                or (
                    r.created_at <= at
                    and (r.invalid_at is None or r.invalid_at > at)
                    and (r.expires_at is None or r.expires_at > at)
                )
            )
            and (include_invalid or r.invalid_at is None)
        ]
        return sorted(rows, key=lambda r: (-r.created_at.timestamp(), str(r.id)))[:limit]

    async def count_facts(self, user_id: UUID) -> int:
        """The user's fact rows."""
        return sum(1 for r in self._rows.get(user_id, {}).values() if r.kind == "fact")

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
        return score_in_python(list(self._rows.get(user_id, {}).values()), query, self._embeddings)

    async def set_embeddings(self, user_id: UUID, model: str, items: Sequence[EmbeddingUpdate]) -> int:
        """Vectors by content_hash, ignoring one computed from a text the fact no longer has."""
        async with self._lock:
            rows = self._rows.get(user_id, {})
            stored = 0
            for item in items:
                record = rows.get(item.content_hash)
                if record is not None and record.kind == "fact" and record.content == item.content:
                    self._embeddings[record.id] = StoredVector(model, item.embedding, record.content)
                    stored += 1
            return stored

    async def embedding_backlog(self, user_id: UUID, model: str, *, limit: int = 1000) -> list[BacklogItem]:
        """Facts without a vector of `model`, in insertion order."""
        backlog = [
            BacklogItem(r.id, r.content_hash, r.content)
            for r in self._rows.get(user_id, {}).values()
            if r.kind == "fact" and not _has_vector(self._embeddings.get(r.id), model, r.content)
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


def _representative(target: str, group: Sequence[tuple[int, MemoryItem]]) -> tuple[int, MemoryItem]:
    """The (position, item) whose fields a folded group keeps: the one matching the target exactly, else the
    first."""
    return next((p for p in group if p[1].content_hash == target), group[0])


def _fold(target: str, group: Sequence[MemoryItem]) -> MemoryItem:
    """Items landing on one row, folded as `memory_upsert_items` folds them (see its `folded` step)."""
    first = next((i for i in group if i.content_hash == target), group[0])
    if len(group) == 1:
        return replace(first, content_hash=target)
    expiries = [i.expires_at for i in group]
    occurred = [i.occurred_at for i in group if i.occurred_at is not None]
    return replace(
        first,
        content_hash=target,
        confidence=max(i.confidence for i in group),
        importance=max(i.importance for i in group),
        source="explicit" if any(i.source == "explicit" for i in group) else first.source,
        source_message_ids=tuple(dict.fromkeys(x for i in group for x in i.source_message_ids)),
        occurred_at=min(occurred) if occurred else None,
        expires_at=None if any(e is None for e in expiries) else max(e for e in expiries if e is not None),
        replaces=next((i.replaces for i in group if i.replaces is not None), None),
    )


def _has_vector(stored: StoredVector | None, model: str, content: str) -> bool:
    """Whether `stored` is a vector of `model` computed from `content` (a vector of an older text does not
    count: the SQL drops it when the text changes)."""
    return stored is not None and stored.model == model and stored.text == content
