"""The long-term store contract every backend implements (in-memory, Postgres; Supabase later).

Every method is scoped to one user: a backend never returns or changes another user's rows. The
Postgres backend additionally has the database enforce this with row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable
from uuid import UUID

from ..quality.decay import DecayPolicy
from ..quality.semantic import DEFAULT_EMBEDDING_THRESHOLD
from ..ranking import RankingWeights
from ..rows import MemoryItem, MemoryKind, MemoryRecord

if TYPE_CHECKING:
    from ..retrieval import BacklogItem, EmbeddingUpdate, ScoredMemory, SearchQuery

__all__ = ["DEFAULT_EMBEDDING_THRESHOLD", "DEFAULT_NEAR_DUPLICATE_THRESHOLD", "ContextQuery", "LongTermStore"]

DEFAULT_NEAR_DUPLICATE_THRESHOLD = 0.8
"""Trigram similarity at or above which a new fact reinforces a stored one (see `quality/matching.py`)."""


@dataclass(frozen=True, slots=True)
class ContextQuery:
    """What `LongTermStore.context` should return for a user."""

    max_facts: int = 12
    """Best-ranked facts to return."""
    max_projects: int = 3
    """Most recent projects to return."""
    max_patterns: int = 3
    """Most frequent patterns to return."""
    weights: RankingWeights = field(default_factory=RankingWeights)
    """How facts are ranked."""
    now: datetime | None = None
    """The time ranking is computed at (`now()` when None; set in tests)."""
    decay: DecayPolicy = field(default_factory=DecayPolicy)
    """Half-lives per category and the floor: facts are ranked on their decayed confidence."""
    max_rejections: int = 20
    """Current rejections ("never suggest X") returned after the ranked facts, newest first."""


@runtime_checkable
class LongTermStore(Protocol):
    """Persistent, per-user memory items.

    Writes of several items are one round trip; repeats (same `content_hash`) reinforce the stored row.
    """

    @property
    def backend_name(self) -> str:
        """Short name for status and logs: "postgres", "memory"..."""
        ...

    async def upsert(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        *,
        reinforcement_step: float,
        write_id: UUID | None = None,
        near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD,
        embedding_threshold: float = DEFAULT_EMBEDDING_THRESHOLD,
    ) -> list[MemoryRecord]:
        """Insert `items` or reinforce the rows they repeat; returns the rows written, then the rows the write
        superseded (`invalid_at` set).

        A fact item reinforces a current fact of the same category it nearly duplicates (trigram similarity
        at least `near_duplicate_threshold`, same numbers and negation; above 1: off), or, when the item carries
        an embedding, whose vector of the same model has cosine similarity at least `embedding_threshold` (same
        guard; tried first; above 1: off; `quality/semantic.py`). An item with `replaces`
        supersedes that current fact; for each slot written, the latest stated current fact of the slot
        supersedes the others (`memory_plugin/quality/`).

        `write_id` is an idempotency key: a write whose id the backend has already applied changes nothing
        and returns the same rows as they are now, so a retried or replayed write is applied once.
        """
        ...

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """Ranked current facts (decayed confidence; not rejections), then the current rejections, all
        preferences, recent projects and frequent patterns of the user."""
        ...

    async def fact_history(
        self, user_id: UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The user's facts as they stood at `at` (learned by then, not yet invalid or expired then), or all
        facts when `at` is None; `include_invalid=False` leaves out facts no longer valid now. Newest first."""
        ...

    async def list_records(
        self, user_id: UUID, *, kind: MemoryKind | None = None, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The user's rows, newest first (for inspection and export)."""
        ...

    async def search_text(self, user_id: UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """Rows whose content contains `text`, ignoring case, most important first."""
        ...

    async def search(self, user_id: UUID, query: SearchQuery) -> list[ScoredMemory]:
        """The user's best valid, unexpired facts for `query.text`, best first, with their score's parts
        (hybrid ranking: `public.memory_search`; in Python for stores without SQL)."""
        ...

    async def set_embeddings(self, user_id: UUID, model: str, items: Sequence[EmbeddingUpdate]) -> int:
        """Store vectors of `model` for the user's facts (by `content_hash`); returns how many were stored."""
        ...

    async def embedding_backlog(self, user_id: UUID, model: str, *, limit: int = 1000) -> list[BacklogItem]:
        """Facts of the user without a vector of `model`, oldest first."""
        ...

    async def delete(self, user_id: UUID, record_id: UUID) -> bool:
        """Delete one of the user's rows; returns whether it existed."""
        ...

    async def ping(self) -> bool:
        """Whether the backend answers now."""
        ...

    async def close(self) -> None:
        """Release connections and resources."""
        ...
