"""`ResilientStore`: long-term memory that keeps working while the database is unreachable, losing no write.

It wraps the primary store (Postgres, Supabase). When an operation raises `StoreUnavailableError`:

- reads of the context return the user's last successfully read context from a bounded in-RAM cache,
  labelled as such (`read_context`), or nothing, labelled unavailable: never "this user has no memory"
  (after a query-aware context, the cached facts are the ones it showed: `cache_shown_facts`);
- searches rank the cached context's facts in Python (`search`);
- writes are appended to the fsynced `WriteJournal` and acknowledged only then; a background task replays
  them when the database answers again (exponential backoff with jitter between attempts), and the next
  start of the process replays what an earlier one left;
- other operations (list, history, delete, embeddings) raise, as before.

Only unreachability is an outage (`database.classify`). A statement the database refuses while reachable
(over its `statement_timeout`, too big, invalid) raises to the caller (`StatementLimitError`, `StoreError`)
and is never acknowledged. A journaled entry (acknowledged during an outage) over a limit on replay is
replayed in halves, down to single items; what is still refused is set aside in the rejected file with its
reason (at once for a limit, after a few attempts otherwise), reported by `status` and `memory-plugin
journal`, and the user's later writes go on.

Order: while a user has entries in the journal, that user's new writes go to the journal behind them, and
the journal is replayed first in, first out, so the database applies a user's writes in the order they
were acknowledged. Exactly once: every write gets a `write_id` before its first attempt and keeps it in the
journal; `memory_upsert_items` records applied ids in the same transaction as the rows, so neither a write
whose acknowledgement was lost after it committed nor a replay interrupted by a crash is applied twice.
Entries leave the journal only after the database confirmed them.

With `require_primary` (`REQUIRE_PG_MEMORY=true`) nothing falls back: unavailability raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ..errors import StoreError, StoreUnavailableError
from ..logs import LOG_PREFIX, logger
from ..quality.rules import WriteRules
from ..retrieval.scored import ScoredMemory
from ..retrieval.search import BacklogItem, EmbeddingUpdate, SearchQuery, score_in_python
from ..rows import MemoryItem, MemoryKind, MemoryRecord
from ..settings import MemorySettings
from ..store.base import DEFAULT_WRITE_RULES, ContextQuery, ContextRead, LongTermStore, StoreBase
from ..store.status import BackendStatus
from .breaker import CircuitBreaker
from .cache import ContextCache
from .journal import JournalEntry, WriteJournal
from .replay import JournalReplay, backoff_delay

__all__ = ["PrimaryConnector", "ResilientStore", "backoff_delay"]


PrimaryConnector = Callable[[], Coroutine[Any, Any, LongTermStore]]
"""Creates the primary store (connects, migrates); raises `StoreUnavailableError` while it cannot."""


class ResilientStore(JournalReplay, StoreBase):
    """A `LongTermStore` over a primary store, with a read cache and a write journal for outages.

    Call `await store.start()` before use (`MemoryManager` does) and `await store.close()` after.

    Args:
        primary: The store to use, or None when it could not be created yet; then `connect` creates it,
            at `start()` and in the background until it succeeds.
        journal: Where writes go while the primary is unreachable. One file per database (see
            `journal_path`), so entries are never replayed into another database.
        connect: Creates the primary store (raising `StoreUnavailableError` while it cannot).
        primary_name: The primary's name before it exists (default: "postgres").
        require_primary: No fallback: unavailability raises `StoreUnavailableError` (`REQUIRE_PG_MEMORY`).
        cache_size: Users whose last context is kept for reads during an outage (least recently used go).
        retry_base_seconds, retry_max_seconds: Backoff between background reconnection/replay attempts.
        log_interval_seconds: At most one warning per interval for connection errors; the others are
            counted and the next warning says how many there were.
        close_flush_seconds: On close, time allowed to replay pending entries if the database answers.
        background: Run the background replayer. False: the journal is replayed only by `start()` and
            `replay()` (for callers that schedule replays themselves, and tests).
        clock: Monotonic clock for the log throttle (tests inject one).
        rng: Randomness of the backoff jitter (tests inject a seeded one).
        breaker: Skips the primary for a short, growing interval after a failure (`CircuitBreaker`), so calls
            during an outage fail over at once instead of each waiting for a timeout.
    """

    def __init__(
        self,
        primary: LongTermStore | None,
        journal: WriteJournal,
        *,
        connect: PrimaryConnector | None = None,
        primary_name: str | None = None,
        require_primary: bool = False,
        cache_size: int = 1000,
        retry_base_seconds: float = 0.5,
        retry_max_seconds: float = 60.0,
        log_interval_seconds: float = 60.0,
        close_flush_seconds: float = 5.0,
        background: bool = True,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if primary is None and connect is None:
            raise ValueError("ResilientStore needs a primary store or a `connect` that creates one")
        self._primary = primary
        self._connect = connect
        self._primary_name = primary.backend_name if primary is not None else (primary_name or "postgres")
        self.journal = journal
        self.require_primary = require_primary
        self._retry_base = retry_base_seconds
        self._retry_max = retry_max_seconds
        self._log_interval = log_interval_seconds
        self._close_flush = close_flush_seconds
        self._background = background
        self._clock = clock
        self._rng = rng or random.Random()
        self._breaker = breaker or CircuitBreaker()

        self._cache = ContextCache(cache_size)
        # Journal entries not yet confirmed by the database: write_id -> user, and per-user counts (order).
        self._pending: dict[UUID, UUID] = {}
        self._pending_users: Counter[UUID] = Counter()
        self._refusals: Counter[UUID] = Counter()
        self._reachable = primary is not None
        self._last_error: str | None = None
        self._last_error_at: datetime | None = None
        self._last_warning_at: float | None = None
        self._suppressed = 0
        self.connection_errors = 0
        self.fallback_reads = 0
        self.journaled_writes = 0
        self.replayed_writes = 0
        self.replay_failures = 0
        self.rejected_writes = 0

        self._replay_lock = asyncio.Lock()
        self._connect_lock = asyncio.Lock()
        self._connecting: asyncio.Task[LongTermStore] | None = None
        self._work = asyncio.Event()  # something to replay or to connect
        self._recovered = asyncio.Event()  # a call to the primary just succeeded: cut the backoff short
        self._worker: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    @classmethod
    def around(cls, store: LongTermStore, settings: MemorySettings, *, identity: str) -> ResilientStore:
        """Wrap a store you built yourself (e.g. a `SupabaseStore`) with the settings' fallback behaviour.

        `identity` names the database behind `store` (e.g. the Supabase project URL): it selects the journal
        file under `settings.data_dir`, so writes journaled for one project are never replayed into another.
        Pass the result to `MemoryManager.open(settings, store=...)`, which starts it.
        """
        return cls(
            store,
            WriteJournal.for_database(settings.data_dir, identity),
            require_primary=settings.require_pg_memory,
            cache_size=settings.fallback_cache_users,
            retry_base_seconds=settings.retry_base_seconds,
            retry_max_seconds=settings.retry_max_seconds,
            log_interval_seconds=settings.outage_log_interval_seconds,
        )

    # --- lifecycle -----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Create the primary if needed (one attempt), replay what earlier runs left in the journal, and start
        the background replayer. Idempotent. With `require_primary`, raises if the primary is unreachable."""
        if self._started:
            return
        self._started = True
        for entry in await asyncio.to_thread(self.journal.entries):
            self._track(entry)
        if self._pending:
            logger.info("%s %d journaled writes from an earlier run to replay", LOG_PREFIX, len(self._pending))
        if self._primary is None:
            await self._ensure_primary()
        if self._primary is None:
            if self.require_primary:
                raise self._unavailable()
            logger.warning(
                "%s starting in fallback mode: long-term reads come from the cache, writes go to %s and are"
                " replayed when the database answers",
                LOG_PREFIX,
                self.journal.path,
            )
        elif self._pending:
            await self._replay_pass()
        if self._background:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="memory_plugin-journal-replayer")

    async def close(self) -> None:
        """Stop the replayer, try once more to replay (if the database answers, within `close_flush_seconds`),
        and close the primary. Entries not replayed stay in the journal for the next start."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        if self._connecting is not None:
            # A connection attempt cut short by the cancellation: let it end (its own timeout bounds it) so
            # that a store it creates is closed rather than leaked.
            with contextlib.suppress(Exception):
                late = await self._connecting
                if self._primary is None:
                    self._primary = late
                else:
                    await late.close()
            self._connecting = None
        if self._primary is not None:
            if self._pending and self._reachable:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._replay_pass(), self._close_flush)
            await self._primary.close()
        if self._pending:
            logger.info("%s %d writes stay in %s for the next start", LOG_PREFIX, len(self._pending), self.journal.path)

    @property
    def backend_name(self) -> str:
        """The primary's name: this store stands in for it."""
        return self._primary_name

    @property
    def primary(self) -> LongTermStore | None:
        """The wrapped store (None until it could be created)."""
        return self._primary

    @property
    def pending_writes(self) -> int:
        """Writes of this process (and found at start) waiting in the journal."""
        return len(self._pending)

    # --- writes ----------------------------------------------------------------------------------------------------
    async def upsert(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        rules: WriteRules = DEFAULT_WRITE_RULES,
        *,
        write_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        """Write through to the primary; if it is unreachable, or earlier writes of the user are still in the
        journal, append to the journal (durable when this returns) and return provisional records: built from
        the items, `relevance_count` 0, ids that are not the database's (replay inserts or reinforces)."""
        if not items:
            return []
        write_id = write_id or uuid.uuid4()
        if self._pending_users[user_id] and self.require_primary:
            await self.replay()  # the user's earlier writes first; they cannot wait in the journal
        if not self._pending_users[user_id]:
            try:
                return await self._call("writing memory", lambda p: p.upsert(user_id, items, rules, write_id=write_id))
            except StoreUnavailableError:
                if self.require_primary:
                    raise
        elif self.require_primary:
            raise self._unavailable()
        # Items without a time would get the replay's time: stamp them with the time they were written.
        now = datetime.now(UTC)
        items = [item if item.occurred_at else dataclasses.replace(item, occurred_at=now) for item in items]
        try:
            entry = await asyncio.to_thread(
                self.journal.append,
                user_id,
                items,
                rules,
                write_id=write_id,
            )
        except OSError as exc:
            raise StoreUnavailableError(
                f"the database is unreachable and the journal {self.journal.path} could not be written: {exc}"
            ) from exc
        self._track(entry)
        self.journaled_writes += 1
        self._work.set()
        logger.debug("%s journaled write %s for user %s", LOG_PREFIX, write_id, user_id)
        return _provisional_records(entry, now)

    async def set_aside(
        self, user_id: UUID, items: Sequence[MemoryItem], rules: WriteRules, *, write_id: UUID, reason: str
    ) -> bool:
        """Keep a write the database refused while reachable in the journal's rejected file, with `reason`,
        as a replay sets aside a journaled one: `status` counts it, `memory-plugin journal` lists it,
        `--readmit` replays it, `--discard` drops it. False when the file cannot be written."""
        if not items:
            return True
        # Stamped as a journaled write is: a readmitted one must not take the time of its replay.
        now = datetime.now(UTC)
        stamped = tuple(item if item.occurred_at else dataclasses.replace(item, occurred_at=now) for item in items)
        entry = JournalEntry(write_id=write_id, user_id=user_id, items=stamped, rules=rules)
        try:
            await asyncio.to_thread(self.journal.reject, entry, reason)
        except OSError as exc:
            logger.error("%s could not keep a refused write in %s: %s", LOG_PREFIX, self.journal.rejected_path, exc)
            return False
        return True

    # --- reads -------------------------------------------------------------------------------------------------------
    async def read_context(self, user_id: UUID, query: ContextQuery) -> ContextRead:
        """The user's context from the primary, else (unreachable) the last one read, else nothing, saying
        which. Raises only with `require_primary`, or for errors other than unavailability."""
        try:
            records = await self._call("reading the context", lambda p: p.context(user_id, query))
        except StoreUnavailableError:
            if self.require_primary:
                raise
        else:
            now = datetime.now(UTC)
            # A read that skipped the ranked facts (a query-aware context) keeps the cached ones.
            self._cache.remember(user_id, records, now, keep_ranked_facts=query.max_facts == 0)
            return ContextRead(records, "primary", now)
        self.fallback_reads += 1
        cached = self._cache.get(user_id)
        if cached is None:
            return ContextRead([], "unavailable", None)
        return ContextRead(list(cached[0]), "cache", cached[1])

    def cache_shown_facts(self, user_id: UUID, facts: Sequence[MemoryRecord]) -> None:
        """Make `facts` the ranked facts of the user's cached context: what a query-aware context showed
        (`get_memory_context(query=…)` reads the rest of the context without ranking facts). Rejections and
        the other kinds stay as read. No-op when the user has no cached context."""
        self._cache.show_facts(user_id, facts)

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """`read_context`'s records; a cached copy while the primary is unreachable (use `read_context` to
        know), `StoreUnavailableError` when there is none."""
        read = await self.read_context(user_id, query)
        if read.source == "unavailable":
            raise self._unavailable()
        return read.records

    async def peek_context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """The primary's context, leaving the cache as it is ([] before the first connection)."""
        primary = self._primary
        if primary is None:
            return []
        return await primary.context(user_id, query)

    async def list_records(
        self, user_id: UUID, *, kind: MemoryKind | None = None, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The primary's rows (no fallback: raises while it is unreachable)."""
        return await self._call("listing memory", lambda p: p.list_records(user_id, kind=kind, limit=limit))

    async def fact_history(
        self, user_id: UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The primary's fact history (no fallback: raises while it is unreachable)."""
        return await self._call(
            "reading fact history",
            lambda p: p.fact_history(user_id, at=at, include_invalid=include_invalid, limit=limit),
        )

    async def count_facts(self, user_id: UUID) -> int:
        """The primary's count; raises `StoreUnavailableError` at once while the primary is known to be down.
        Outside the outage bookkeeping: the write this count precedes records the outage, once."""
        primary = self._primary
        if primary is None or not self._reachable or not self._breaker.allows():
            raise self._unavailable()
        return await primary.count_facts(user_id)

    async def search_text(self, user_id: UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """The primary's search (no fallback)."""
        return await self._call("searching memory", lambda p: p.search_text(user_id, text, limit=limit))

    async def search(self, user_id: UUID, query: SearchQuery) -> list[ScoredMemory]:
        """The primary's hybrid search; while it is unreachable, the same ranking in Python (text, vectors
        absent) over the user's cached context (its facts only: a partial answer, never "nothing known"
        unless nothing is cached). Raises with `require_primary`, or when nothing is cached."""
        try:
            return await self._call("searching memory", lambda p: p.search(user_id, query))
        except StoreUnavailableError:
            if self.require_primary:
                raise
        cached = self._cache.get(user_id)
        if cached is None:
            raise self._unavailable()
        self.fallback_reads += 1
        return score_in_python(cached[0], query)

    async def set_embeddings(self, user_id: UUID, model: str, items: Sequence[EmbeddingUpdate]) -> int:
        """Vectors on the primary (no journal: vectors are derived data; facts written during an outage carry
        their vectors in the journaled write itself, and `reembed` fills any gap). Raises while unreachable."""
        return await self._call("storing embeddings", lambda p: p.set_embeddings(user_id, model, items))

    async def embedding_backlog(self, user_id: UUID, model: str, *, limit: int = 1000) -> list[BacklogItem]:
        """The primary's backlog (no fallback)."""
        return await self._call(
            "listing the embedding backlog", lambda p: p.embedding_backlog(user_id, model, limit=limit)
        )

    async def delete(self, user_id: UUID, record_id: UUID) -> bool:
        """Delete on the primary (no fallback). A forget wins over every older pending write of the same
        memory: the row leaves the cache first, whatever happens, and the journal's pending items of that
        memory (its restatements, or the provisional write itself) are cancelled, so no replay brings it back.
        Replays wait while this runs."""
        content_hash = self._cached_content_hash(user_id, record_id)
        self._cache.forget(user_id, record_id)
        async with self._replay_lock:
            if self._pending_users[user_id]:
                if content_hash is None and self._primary is not None:
                    content_hash = await self._stored_content_hash(user_id, record_id)
                cancelled = await asyncio.to_thread(
                    self.journal.cancel_pending,
                    user_id,
                    memory_ids={record_id},
                    content_hashes={content_hash} if content_hash else (),
                )
                for write_id in cancelled.dropped:
                    self._untrack(write_id)
            return await self._call("deleting memory", lambda p: p.delete(user_id, record_id))

    async def forget_user(self, user_id: UUID) -> int:
        """Drop everything pending or cached for the user (an erasure): journaled writes, rejected lines and
        the cached context. Returns the pending items dropped. Replays wait while this runs."""
        self._cache.drop_user(user_id)
        async with self._replay_lock:
            cancelled = await asyncio.to_thread(self.journal.drop_user, user_id)
            for write_id in cancelled.dropped:
                self._untrack(write_id)
        return cancelled.items

    def _cached_content_hash(self, user_id: UUID, record_id: UUID) -> str | None:
        cached = self._cache.get(user_id)
        if cached is None:
            return None
        return next((r.content_hash for r in cached[0] if r.id == record_id), None)

    async def _stored_content_hash(self, user_id: UUID, record_id: UUID) -> str | None:
        """The row's hash, read from the primary (only when the user has pending writes: a rare path)."""
        try:
            records = await self._call("reading the memory to forget", lambda p: p.list_records(user_id, limit=100_000))
        except StoreError:
            return None
        return next((r.content_hash for r in records if r.id == record_id), None)

    async def ping(self) -> bool:
        """Whether the primary answers now."""
        if self._primary is None:
            return False
        ok = await self._primary.ping()
        if ok:
            self._succeeded()
        else:
            self._reachable = False
        return ok

    # --- replay ------------------------------------------------------------------------------------------------------
    async def replay(self) -> int:
        """Replay the journal now (creating the primary first if needed); returns how many entries the
        database confirmed. Stops at the first connection error, leaving the rest for later."""
        if not await self._ensure_primary():
            return 0
        _, confirmed = await self._replay_pass()
        return confirmed

    async def status(self, *, require_primary: bool = False) -> BackendStatus:
        """Pings the primary (briefly) and reports; see `BackendStatus` (`require_pg_memory` is this store's own
        `require_primary`)."""
        reachable = False
        if self._primary is not None:
            try:
                reachable = await asyncio.wait_for(self.ping(), timeout=2.0)
            except (TimeoutError, StoreError):
                reachable = False
        journal_length = len(await asyncio.to_thread(self.journal.entries))
        set_aside = await asyncio.to_thread(self.journal.set_aside_count)
        return BackendStatus(
            backend=self._primary_name if reachable and journal_length == 0 else "fallback",
            primary=self._primary_name,
            postgres_reachable=reachable,
            journal_length=journal_length,
            journal_path=self.journal.path,
            last_error=self._last_error,
            last_error_at=self._last_error_at,
            connection_errors=self.connection_errors,
            fallback_reads=self.fallback_reads,
            journaled_writes=self.journaled_writes,
            replayed_writes=self.replayed_writes,
            replay_failures=self.replay_failures,
            rejected_writes=self.rejected_writes,
            set_aside_writes=set_aside,
            cache_entries=len(self._cache),
            require_pg_memory=self.require_primary,
        )


def _provisional_records(entry: JournalEntry, now: datetime) -> list[MemoryRecord]:
    """What a journaled write returns: the items as new rows, with the ids `cancel_pending` knows them by."""
    return [
        MemoryRecord.inserted(entry.user_id, item, record_id=entry.record_id(item), now=now) for item in entry.items
    ]
