"""`MemoryManager`: the one object an application talks to.

A facade over services with one job each, sharing one long-term store:

- `ContextReader` (`context/reader.py`): the session's state plus the user's long-term memory;
- `WritePipeline` (`write/pipeline.py`): admission, sanitising, folding, embedding and upserting writes;
- `ExtractionRunner` (`extraction/runner.py`): when and how facts are extracted from a session;
- `Searcher` (`retrieval/searcher.py`): query-aware search.

It validates input, owns the lifecycle (connect, migrate, replay, sweep expired sessions, close) and sums the
services' counters in `stats`. This module builds the services and owns the lifecycle (the backends come from
`runtime/assembly.py`); the operations are grouped by concept in `runtime/`: `short_term.py` (sessions, the
turn, the context), `long_term.py` (writes, extraction, remember, search), `control.py` (inspection, forget,
export, import, pause, status), over `core.py` (shared state, checks, background work):

    async with MemoryManager.open() as memory:  # no settings: the embedded default database
        ctx = await memory.get_memory_context(session_id, user_id)
        prompt_block = memory.format_memory_for_agent(ctx)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from uuid import UUID

from .consent import ConsentStore
from .context.reader import ContextReader
from .embeddings import MemoryEmbedder, default_embedder
from .extraction import FactExtractor, default_extractor
from .extraction.runner import ExtractionRunner
from .failures import StoreFailures
from .formatting import MemoryFormat
from .retrieval.searcher import Searcher
from .rows import CONTENT_MAX_CHARS
from .runtime.assembly import Assembly, assemble
from .runtime.connector import DatabaseConnector
from .runtime.control import ControlFacade
from .runtime.supervisor import Supervisor
from .runtime.turn import Turn
from .session import Clock, SessionBackend, SessionStore, session_calls
from .settings import MemorySettings
from .stats import MemoryStats
from .store import ContextQuery, LongTermStore
from .store.sealed import sealed_if_keys
from .write.pipeline import WritePipeline

if TYPE_CHECKING:
    from .context.builder import ContextBuilder
    from .store.postgres import PostgresStore

__all__ = ["MemoryManager", "MemoryStats"]


class MemoryManager(ControlFacade):
    """Short-term sessions and long-term user memory for agents.

    Build with `MemoryManager.open(settings)` (an async context manager; settings optional) or
    `await MemoryManager.create(...)` plus `await memory.close()`. Every method that touches memory is
    awaited; `format_memory_for_agent` is pure.
    """

    def __init__(
        self,
        settings: MemorySettings,
        store: LongTermStore,
        *,
        extractor: FactExtractor | None = None,
        clock: Clock | None = None,
        database_url: str | None = None,
        embedder: MemoryEmbedder | None = None,
        sessions: SessionBackend | None = None,
    ) -> None:
        settings.check_content_limit(CONTENT_MAX_CHARS)  # a limit the schema cannot hold fails here, not per write
        self.settings = settings
        self.store = store = sealed_if_keys(store, settings)  # also for a manager built without `create`
        self.embedder = embedder if embedder is not None else default_embedder(settings)
        """Embeds facts at write time and questions at search time (None: text-only search)."""
        self._sessions: SessionBackend = (
            sessions if sessions is not None else SessionStore.from_settings(settings, clock=clock or time.monotonic)
        )
        self._session_calls = session_calls(self._sessions)
        """The session operations of the request path (on the loop's own pool, inline in RAM, else a thread)."""
        self._failures = StoreFailures(settings.outage_log_interval_seconds)
        """Long-term reads that failed, counted and logged (throttled)."""
        self._searcher = Searcher(settings, store, self.embedder)
        """Query-aware search."""
        self._context_reader = ContextReader(settings, store, self._searcher, self._failures)
        """Reads the context given to an agent."""
        self._writer = WritePipeline(settings, store, self.embedder)
        """Every write to long-term memory."""
        self._extraction = ExtractionRunner(
            settings,
            extractor or default_extractor(settings.extraction_model),
            self._sessions,
            self._writer,
            store,
            self._failures,
            ContextQuery(
                max_facts=settings.extraction_candidate_facts,
                max_projects=0,
                max_patterns=0,
                weights=self._context_reader.weights,
            ),
        )
        """Extraction of lasting facts from sessions."""
        self._format = MemoryFormat(
            recent_messages=settings.recent_messages_in_prompt,
            message_chars=settings.message_chars_in_prompt,
            max_block_chars=settings.max_memory_block_chars,
        )
        self._closed = False
        self._messages_added = 0
        self._valid_session_ids: set[str] = set()
        """Session ids `check_session_id` accepted (`_remember_session_id`)."""
        self._supervisor = Supervisor(settings, self._run_job)
        """The work off the request path: job queue, worker, tasks, session sweeper (`runtime/supervisor.py`)."""
        self._consent = ConsentStore(database_url)
        """The users' memory switch (`pause_memory`): in the database, or in this process without one."""
        self._exchanges_not_recorded = 0
        self._database_url = database_url
        self._connector: DatabaseConnector | None = None
        self._assembly: Assembly | None = None
        self._context: ContextBuilder | None = None
        self._context_lock = asyncio.Lock()

    # --- lifecycle ---------------------------------------------------------------------------------------
    @classmethod
    async def create(
        cls,
        settings: MemorySettings | None = None,
        *,
        store: LongTermStore | None = None,
        extractor: FactExtractor | None = None,
        clock: Clock | None = None,
        embedder: MemoryEmbedder | None = None,
        keep_running: bool = False,
    ) -> MemoryManager:
        """Connect (starting the embedded Postgres when no `database_url` is set), migrate, and return a
        ready manager. Pass `store=InMemoryStore()` for a database-free manager (tests); a store passed in
        is used as is.

        The store created here is wrapped in `ResilientStore` (unless `resilient_store=False`): if the
        database is unreachable, the manager starts in fallback mode and keeps trying in the background,
        unless `require_pg_memory`, which raises `StoreUnavailableError` instead. `keep_running`: an embedded
        server started here stays up after the process (a server's, e.g. `memory-plugin serve`).
        """
        settings = settings or MemorySettings()
        parts = await assemble(settings, store=store, keep_running=keep_running)
        manager = cls(
            settings, parts.store, extractor=extractor, clock=clock, embedder=embedder, sessions=parts.sessions
        )
        manager._assembly = parts
        manager._connector = parts.connector
        if parts.connector is not None and parts.connector.url is not None:
            # On the one pool (the store's role); a database down at start: a pool of its own, same role.
            pool = parts.pool()
            url = None if pool is not None else parts.library_url()
            manager._consent = ConsentStore(url, pool=pool, timeout=settings.connect_timeout_seconds)
        manager._supervisor.start_sweeper(manager._sessions)
        try:
            await manager._supervisor.start(parts.library_url(), parts.pool())
        except BaseException:
            await manager.close()
            raise
        return manager

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: MemorySettings | None = None,
        *,
        store: LongTermStore | None = None,
        extractor: FactExtractor | None = None,
        clock: Clock | None = None,
        embedder: MemoryEmbedder | None = None,
        keep_running: bool = False,
    ) -> AsyncIterator[MemoryManager]:
        """`async with MemoryManager.open(settings) as memory:` — see `create`; closes on exit. `embedder`
        overrides the one `settings.embedding_model` chooses."""
        manager = await cls.create(
            settings, store=store, extractor=extractor, clock=clock, embedder=embedder, keep_running=keep_running
        )
        try:
            yield manager
        finally:
            await manager.close()

    @property
    def database_store(self) -> PostgresStore | None:
        """The Postgres store on the manager's one pool, as the library's role (None: a store passed in, or
        the database down at start): for a face that serves the same database beside the manager (the REST
        API's chats, export and switch), so a process has one pool."""
        return None if self._assembly is None else self._assembly.database()

    @property
    def memory_switch(self) -> ConsentStore:
        """The users' memory switch this manager reads and sets (`pause_memory`): a face serving beside the manager
        (the REST API, the dashboard) shares it, so a pause applies to this process's turns at once."""
        return self._consent

    def turn(self, session_id: str, user_id: str | UUID | None) -> Turn:
        """One turn of `session_id` for `user_id`, the same for every face (`runtime/turn.py`): `await
        turn.start(prompt)` checks it and reads its context before the model call; `await turn.finish(prompt=…,
        answer=…)` records the exchange, extracts now or queues (the policy decides), and patches the slots and
        summary, reporting (`TurnOutcome`) instead of raising for memory."""
        self._check_open()
        return Turn(self, session_id, user_id)

    async def close(self) -> None:
        """Stop background work and close the store's connections. The embedded server, if any, keeps
        running until the process exits (other managers in the process may share it)."""
        self._closed = True
        await self._supervisor.close()
        self._sessions.close()
        if self._context is not None:
            await self._context.close()
        await self._consent.close()
        await self.store.close()
