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
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

from ..errors import StatementLimitError, StoreError, StoreUnavailableError
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

__all__ = ["PrimaryConnector", "ResilientStore", "backoff_delay"]


PrimaryConnector = Callable[[], Coroutine[Any, Any, LongTermStore]]
"""Creates the primary store (connects, migrates); raises `StoreUnavailableError` while it cannot."""

_T = TypeVar("_T")
_RNG = random.Random()
_MAX_REFUSALS = 3
"""Replays of one entry the database refuses (an error other than unavailability) before it is set aside."""
_REPLAY_CHUNK = 1000
"""Entries replayed between two rewrites of the journal: bounds the (idempotent) work redone after a crash
without rewriting a long journal after every entry."""


def backoff_delay(attempt: int, *, base: float, maximum: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number `attempt` (0 for the first): `base * 2**attempt` capped at `maximum`, with
    "equal jitter" (half fixed, half random), so many processes do not retry in lockstep yet never spin."""
    ceiling = min(maximum, base * 2.0 ** min(attempt, 60))
    return ceiling / 2 + (rng or _RNG).uniform(0, ceiling / 2)


class ResilientStore(StoreBase):
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
        self._rng = rng or _RNG
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
        set_aside = len(await asyncio.to_thread(self.journal.rejected))
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

    async def _replay_pass(self) -> tuple[bool, int]:
        """Replay the whole journal, oldest first; (whether it is now empty, entries confirmed)."""
        primary = self._primary
        if primary is None:
            return False, 0
        confirmed = 0
        async with self._replay_lock:
            while True:  # until a read finds the journal empty: entries may be appended meanwhile
                entries = await asyncio.to_thread(self.journal.entries)
                self._resync(entries)
                if not entries:
                    return True, confirmed
                for start in range(0, len(entries), _REPLAY_CHUNK):
                    chunk = entries[start : start + _REPLAY_CHUNK]
                    done, applied, complete = await self._replay_entries(primary, chunk)
                    if done:
                        # Only now, after the database confirmed them, do the entries leave the journal.
                        await asyncio.to_thread(self.journal.remove, done)
                        for write_id in done:
                            self._untrack(write_id)
                    confirmed += applied
                    if not complete:
                        return False, confirmed

    async def _replay_entries(
        self, primary: LongTermStore, entries: Sequence[JournalEntry]
    ) -> tuple[list[UUID], int, bool]:
        """(write ids done with, how many the database applied, whether all of `entries` were done with)."""
        done: list[UUID] = []
        applied = 0
        for entry in entries:
            finished, count, complete = await self._replay_entry(primary, entry)
            done += finished
            applied += count
            if not complete:
                return done, applied, False  # later entries of the user must not overtake it
        return done, applied, True

    async def _replay_entry(self, primary: LongTermStore, entry: JournalEntry) -> tuple[list[UUID], int, bool]:
        """Replay one entry: (write ids done with, entries applied, whether it is done with)."""
        try:
            await primary.upsert(entry.user_id, entry.items, entry.rules, write_id=entry.write_id)
        except StoreUnavailableError as exc:
            self.replay_failures += 1
            self._failed("replaying the journal", exc)
            return [], 0, False
        except StatementLimitError as exc:
            # Reachable, and this entry is over a limit: every replay of it whole would fail the same way (and
            # hold the replay for the whole timeout). It was acknowledged, so it is applied in halves (each
            # with its own write id, the split made durable first); a single item over the limit is set aside
            # with the reason, and the journal goes on.
            self.replay_failures += 1
            if len(entry.items) < 2:
                await self._set_aside(entry, exc, attempts=1)
                return [entry.write_id], 0, True
            return await self._replay_halves(primary, entry)
        except StoreError as exc:
            self.replay_failures += 1
            if not await self._refused(entry, exc):
                return [], 0, False
            return [entry.write_id], 0, True
        self.replayed_writes += 1
        self._refusals.pop(entry.write_id, None)
        self._succeeded()
        return [entry.write_id], 1, True

    async def _replay_halves(self, primary: LongTermStore, entry: JournalEntry) -> tuple[list[UUID], int, bool]:
        parts = entry.halves()
        await asyncio.to_thread(self.journal.split, entry, parts)
        self._untrack(entry.write_id)
        for part in parts:
            self._track(part)
        logger.warning(
            "%s journaled write %s (%d items) is over a database limit: replayed in two parts",
            LOG_PREFIX,
            entry.write_id,
            len(entry.items),
        )
        done: list[UUID] = []
        applied = 0
        for part in parts:
            finished, count, complete = await self._replay_entry(primary, part)
            done += finished
            applied += count
            if not complete:
                return done, applied, False
        return done, applied, True

    async def _refused(self, entry: JournalEntry, exc: StoreError) -> bool:
        """The database refused an entry (not a connection error). Retried a few times (it may be transient),
        then set aside in the rejected file so the rest of the journal can go on; True when set aside."""
        self._refusals[entry.write_id] += 1
        attempts = self._refusals[entry.write_id]
        if attempts < _MAX_REFUSALS:
            logger.warning(
                "%s the database refused journaled write %s (attempt %d of %d): %s",
                LOG_PREFIX,
                entry.write_id,
                attempts,
                _MAX_REFUSALS,
                exc,
            )
            return False
        await self._set_aside(entry, exc, attempts=attempts)
        return True

    async def _set_aside(self, entry: JournalEntry, exc: StoreError, *, attempts: int) -> None:
        """Move an entry the database refused to the rejected file with the reason (`memory-plugin journal`
        lists it, `--readmit` brings it back); the caller counts it done, so the user's later writes go on."""
        await asyncio.to_thread(self.journal.reject, entry, str(exc))
        self._refusals.pop(entry.write_id, None)
        self.rejected_writes += 1
        logger.error(
            "%s journaled write %s of user %s refused %d time(s), moved to %s: %s",
            LOG_PREFIX,
            entry.write_id,
            entry.user_id,
            attempts,
            self.journal.rejected_path,
            exc,
        )

    async def _run(self) -> None:
        """The background replayer: (re)connect and replay while there is work, backing off on failure."""
        attempt = 0
        while True:
            self._work.clear()
            if self._primary is not None and not self._pending:
                await self._work.wait()
                continue
            try:
                ok = await self._ensure_primary() and (await self._replay_pass())[0]
            except Exception:  # the replayer must not die silently: log, back off, go on
                logger.exception("%s journal replay failed unexpectedly", LOG_PREFIX)
                ok = False
            if ok:
                attempt = 0
                continue
            delay = backoff_delay(attempt, base=self._retry_base, maximum=self._retry_max, rng=self._rng)
            attempt += 1
            self._recovered.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._recovered.wait(), delay)

    async def _ensure_primary(self) -> bool:
        """Create the primary with `connect` if there is none yet; whether there is one now."""
        if self._primary is not None:
            return True
        if self._connect is None:
            return False
        async with self._connect_lock:
            if self._primary is not None:
                return True
            if self._connecting is None:
                self._connecting = asyncio.get_running_loop().create_task(
                    self._connect(), name="memory_plugin-store-connect"
                )
            task = self._connecting
            try:
                # Shielded: if our caller is cancelled (close), the attempt ends on its own and close()
                # collects the store it may create instead of leaking its connections.
                primary = await asyncio.shield(task)
            except Exception as exc:
                self._connecting = None
                self._failed("connecting", exc)
                return False
            self._connecting = None
            self._primary = primary
            self._primary_name = primary.backend_name
            logger.info("%s connected to the long-term store (%s)", LOG_PREFIX, primary.backend_name)
            self._succeeded()
            return True

    # --- helpers -----------------------------------------------------------------------------------------------------
    def _unavailable(self) -> StoreUnavailableError:
        return StoreUnavailableError(self._last_error or "the long-term store is unreachable")

    async def _call(self, doing: str, operation: Callable[[LongTermStore], Awaitable[_T]]) -> _T:
        """`operation` on the primary, recording the outcome; raises `StoreUnavailableError` while there is
        no primary or it is unreachable."""
        primary = self._primary
        if primary is None or not self._breaker.allows():
            raise self._unavailable()
        started = time.monotonic()
        try:
            result = await operation(primary)
        except StoreUnavailableError as exc:
            self._breaker.failed(time.monotonic() - started)
            self._failed(doing, exc)
            raise
        self._succeeded()
        return result

    def _resync(self, entries: Sequence[JournalEntry]) -> None:
        """Pending = exactly what the file holds: it may also hold entries of another process sharing it, and
        lack entries that process replayed. (An append in flight is tracked once its line is in the file.)"""
        self._pending.clear()
        self._pending_users.clear()
        for entry in entries:
            self._track(entry)

    def _track(self, entry: JournalEntry) -> None:
        if entry.write_id not in self._pending:
            self._pending[entry.write_id] = entry.user_id
            self._pending_users[entry.user_id] += 1

    def _untrack(self, write_id: UUID) -> None:
        user_id = self._pending.pop(write_id, None)
        if user_id is not None:
            self._pending_users[user_id] -= 1
            if self._pending_users[user_id] <= 0:
                del self._pending_users[user_id]

    def _succeeded(self) -> None:
        self._breaker.succeeded()
        if not self._reachable:
            self._reachable = True
            logger.info("%s long-term store reachable again (%d writes to replay)", LOG_PREFIX, len(self._pending))
        self._recovered.set()
        if self._pending:
            self._work.set()

    def _failed(self, doing: str, exc: BaseException) -> None:
        """Record a connection error; log it at WARNING at most once per interval, counting the others."""
        self._reachable = False
        self.connection_errors += 1
        self._last_error = f"{doing}: {exc}"
        self._last_error_at = datetime.now(UTC)
        now = self._clock()
        if self._last_warning_at is not None and now - self._last_warning_at < self._log_interval:
            self._suppressed += 1
            logger.debug("%s long-term store unreachable while %s: %s", LOG_PREFIX, doing, exc)
            return
        suppressed, self._suppressed = self._suppressed, 0
        self._last_warning_at = now
        logger.warning(
            "%s long-term store unreachable while %s: %s%s",
            LOG_PREFIX,
            doing,
            exc,
            f" ({suppressed} more errors since the last warning)" if suppressed else "",
        )


def _provisional_records(entry: JournalEntry, now: datetime) -> list[MemoryRecord]:
    """What a journaled write returns: the items as new rows, with the ids `cancel_pending` knows them by."""
    return [
        MemoryRecord.inserted(entry.user_id, item, record_id=entry.record_id(item), now=now) for item in entry.items
    ]
