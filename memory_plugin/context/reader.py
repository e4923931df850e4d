"""`ContextReader`: reads a `MemoryContext` — the session's short-term state plus the user's long-term memory,
ranked without a query or chosen by a search for the current message."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import UTC, datetime
from uuid import UUID

from ..conversions import fact_from_record, long_term_from_records
from ..errors import InvalidMemoryInputError, StoreError, StoreUnavailableError
from ..failures import StoreFailures
from ..logs import LOG_PREFIX, logger
from ..models import MemoryContext, ShortTermMemory
from ..quality import DecayPolicy
from ..ranking import RankingWeights
from ..retrieval.scored import ScoredMemory
from ..retrieval.searcher import Searcher
from ..settings import MemorySettings
from ..store import ContextQuery, LongTermStore

__all__ = ["ContextReader"]


class ContextReader:
    """Reads contexts from one store; failures are reported to `failures`, never raised (unless
    `require_pg_memory`)."""

    def __init__(
        self, settings: MemorySettings, store: LongTermStore, searcher: Searcher, failures: StoreFailures
    ) -> None:
        self.settings = settings
        self.store = store
        self.searcher = searcher
        self.failures = failures
        self.weights = RankingWeights.from_settings(settings)
        """How facts are ranked without a query."""
        self.decay = DecayPolicy(half_life_days=dict(settings.half_life_days), floor=settings.decay_floor)
        """Half-lives per category and the floor below which a fact is not shown."""

    def query(self, *, max_facts: int | None = None) -> ContextQuery:
        """The store query of a context (`max_facts` ranked facts; the settings' number by default)."""
        s = self.settings
        return ContextQuery(
            max_facts=s.max_facts_in_context if max_facts is None else max_facts,
            max_projects=s.max_projects_in_context,
            max_patterns=s.max_patterns_in_context,
            weights=self.weights,
            decay=self.decay,
            max_rejections=s.max_rejections_in_context,
        )

    async def read(
        self, session_id: str, user_id: UUID, short: ShortTermMemory, *, query: str | None = None
    ) -> MemoryContext:
        """See `MemoryManager.get_memory_context`."""
        found: asyncio.Task[list[ScoredMemory]] | None = None
        if query is not None and query.strip() and self.settings.max_facts_in_context > 0:
            found = asyncio.get_running_loop().create_task(
                self.searcher.search(
                    user_id, query[: self.settings.max_search_chars], limit=self.settings.max_facts_in_context
                )
            )
        try:
            # With a query the search chooses the facts, so the read skips ranking them (at 100k facts that
            # ranking cost 3.9 ms of database time per call, for facts that were then dropped), unless facts may
            # be sealed: search never finds those, so they come from the ranking (below).
            sealing = self.settings.encryption_keys is not None
            context = await self._read(session_id, user_id, short, rank_facts=found is None or sealing)
        except BaseException:
            if found is not None:
                found.cancel()
                with contextlib.suppress(BaseException):
                    await found
            raise
        if found is None:
            return context
        try:
            hits = await found
        except (StoreError, InvalidMemoryInputError) as exc:
            self.failures.report("searching the context's facts", exc)
            # The facts ranked without the query (read now: the first read skipped them).
            return await self._read(session_id, user_id, short)
        chosen = [fact_from_record(h.memory) for h in hits]
        ids = {f.id for f in chosen}
        # Rejections ("don't suggest X") reach the prompt whatever the message; the read returns them whether
        # or not it ranks facts. Sealed facts have no search row: those among the best ranked are kept too.
        kept = [f for f in context.long_term.facts if (f.category == "rejection" or f.sensitive) and f.id not in ids]
        context.long_term.facts = chosen + kept
        context.fact_scores = {h.memory.id: {"score": h.score, **h.components.as_dict()} for h in hits}
        if context.long_term_available:
            # The outage copy keeps the facts this context showed (the read did not fetch ranked ones).
            self.store.cache_shown_facts(user_id, [h.memory for h in hits])
        return context

    async def _read(
        self, session_id: str, user_id: UUID, short: ShortTermMemory, *, rank_facts: bool = True
    ) -> MemoryContext:
        """The context without a query (without the ranked facts when not `rank_facts`; rejections,
        preferences, projects and patterns either way)."""
        query = self.query()
        if not rank_facts:
            query = dataclasses.replace(query, max_facts=0)
        try:
            read = await self.store.read_context(user_id, query)
        except StoreError as exc:
            if self.settings.require_pg_memory and isinstance(exc, StoreUnavailableError):
                raise
            self.failures.report("reading the context", exc)
            return MemoryContext(session_id=session_id, user_id=user_id, short_term=short, long_term_available=False)
        # Confidence shown is the decayed one, as ranked (quality/decay.py).
        long = long_term_from_records(read.records, now=datetime.now(UTC), decay=self.decay)
        if read.source != "primary":
            self.failures.count()  # the store logged it (throttled)
            return MemoryContext(
                session_id=session_id,
                user_id=user_id,
                short_term=short,
                long_term=long,
                long_term_available=False,
                long_term_cached_at=read.as_of if read.source == "cache" else None,
            )
        logger.debug(
            "%s context for %s: %d messages, %d facts", LOG_PREFIX, session_id, len(short.messages), len(long.facts)
        )
        return MemoryContext(session_id=session_id, user_id=user_id, short_term=short, long_term=long)
