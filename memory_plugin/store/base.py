"""The long-term store contract every backend implements (in-memory, Postgres; Supabase later).

Every method is scoped to one user: a backend never returns or changes another user's rows. The
Postgres backend additionally has the database enforce this with row-level security.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable
from uuid import UUID

from ..quality.decay import DecayPolicy
from ..quality.rules import WriteRules
from ..ranking import RankingWeights
from ..rows import MemoryItem, MemoryKind, MemoryRecord
from .status import BackendStatus

if TYPE_CHECKING:
    from ..retrieval import BacklogItem, EmbeddingUpdate, ScoredMemory, SearchQuery

__all__ = ["DEFAULT_WRITE_RULES", "ContextQuery", "ContextRead", "LongTermStore", "StoreBase"]

DEFAULT_WRITE_RULES = WriteRules()
"""The rules of a write when none are given (the settings' defaults)."""


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


@dataclass(frozen=True, slots=True)
class ContextRead:
    """A context read and where it came from."""

    records: list[MemoryRecord]
    """The rows, as `LongTermStore.context` returns them."""
    source: Literal["primary", "cache", "unavailable"]
    """"primary": read now; "cache": the last successful read (the database is unreachable);
    "unavailable": unreachable and nothing cached (`records` is empty, which says nothing about the user)."""
    as_of: datetime | None
    """When the records were read from the primary (UTC); None when unavailable."""


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
        rules: WriteRules = DEFAULT_WRITE_RULES,
        *,
        write_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        """Insert `items` or reinforce the rows they repeat; returns the rows written, then the rows the write
        superseded (`invalid_at` set).

        A fact item reinforces a current fact of the same category it nearly duplicates (trigram similarity
        at least `rules.near_duplicate_threshold`, same numbers and negation; above 1: off), or, when the item carries
        an embedding, whose vector of the same model has cosine similarity at least `rules.embedding_threshold` (same
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

    async def count_facts(self, user_id: UUID) -> int:
        """How many fact rows the user has, current and history (for the per-user fact limit)."""
        ...

    async def ping(self) -> bool:
        """Whether the backend answers now."""
        ...

    async def close(self) -> None:
        """Release connections and resources."""
        ...

    async def start(self) -> None:
        """Get ready before first use (a wrapper connects its primary and replays what an earlier run
        journaled). Called once by the manager that creates or receives the store."""
        ...

    async def read_context(self, user_id: UUID, query: ContextQuery) -> ContextRead:
        """`context`, saying where the rows came from: read now, or a cached copy while the database is
        unreachable (a store without a cache raises instead)."""
        ...

    def cache_shown_facts(self, user_id: UUID, facts: Sequence[MemoryRecord]) -> None:
        """Make `facts` the ranked facts of the user's outage copy: what a query-aware context showed
        (no-op for a store without a cache)."""
        ...

    async def peek_context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """`context` from the database itself, leaving any outage copy as it is: for reads that are not what
        the agent is shown (the candidate facts given to the extractor); [] while a wrapper has no
        connection yet."""
        ...

    async def status(self, *, require_primary: bool = False) -> BackendStatus:
        """Which backend serves memory, whether it answers now (pinged), and the outage counters."""
        ...

    async def set_aside(
        self, user_id: UUID, items: Sequence[MemoryItem], rules: WriteRules, *, write_id: UUID, reason: str
    ) -> bool:
        """Keep a write the database refused while reachable (over a limit even alone) for review, durably,
        beside the outage journal's set-aside writes (`status`, `memory-plugin journal`, `--readmit`,
        `--discard`); False when this store has nowhere to keep it (the caller reports it otherwise)."""
        ...


class StoreBase(ABC):
    """The defaults of a store without an outage cache or journal: subclass it and implement the storage
    methods of `LongTermStore`; override these only to do something special."""

    @property
    @abstractmethod
    def backend_name(self) -> str:
        """Short name for status and logs."""

    @abstractmethod
    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """See `LongTermStore.context`."""

    @abstractmethod
    async def ping(self) -> bool:
        """See `LongTermStore.ping`."""

    async def start(self) -> None:
        """Nothing to do: a store is ready once built."""
        return

    async def read_context(self, user_id: UUID, query: ContextQuery) -> ContextRead:
        """The rows, read now."""
        return ContextRead(await self.context(user_id, query), "primary", datetime.now(UTC))

    def cache_shown_facts(self, user_id: UUID, facts: Sequence[MemoryRecord]) -> None:
        """No cache: nothing to do."""
        return

    async def peek_context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """No cache: the same as `context`."""
        return await self.context(user_id, query)

    async def set_aside(
        self, user_id: UUID, items: Sequence[MemoryItem], rules: WriteRules, *, write_id: UUID, reason: str
    ) -> bool:
        """No journal: nowhere to keep it."""
        return False

    async def status(self, *, require_primary: bool = False) -> BackendStatus:
        """No cache, no journal: the backend and whether it answers."""
        reachable = await self.ping()
        name = self.backend_name
        return BackendStatus(
            backend=name,
            primary=name,
            postgres_reachable=reachable,
            journal_length=0,
            journal_path=None,
            last_error=None,
            last_error_at=None,
            connection_errors=0,
            fallback_reads=0,
            journaled_writes=0,
            replayed_writes=0,
            replay_failures=0,
            rejected_writes=0,
            cache_entries=0,
            require_pg_memory=require_primary,
        )
