"""`JournalReplay`: how `ResilientStore` replays its journal: in order, in chunks, once per write; an entry over a
database limit in halves; an entry the database refuses set aside with its reason, so the rest goes on.

A part of `ResilientStore` (its base class), kept apart because the replay is its own concept: it reads and
sets the store's pending bookkeeping and counters, creates the primary when there is none yet
(`_ensure_primary`, also at start), and records connection outcomes through `PrimaryHealth`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal
from uuid import UUID

from ..backoff import backoff_delay
from ..errors import MemoryLimitError, StatementLimitError, StoreError, StoreUnavailableError
from ..logs import LOG_PREFIX, logger
from ..store.base import LongTermStore
from .health import PrimaryHealth
from .journal import JournalEntry, WriteJournal

__all__ = ["JournalReplay", "backoff_delay"]

_State = Literal["done", "held", "down"]
"""What became of an entry: done with (applied or set aside), held (its user waits), or down (an outage)."""
_MAX_REFUSALS = 3
"""Replays of one entry the database refuses (an error other than unavailability) before it is set aside."""
_REPLAY_CHUNK = 1000
"""Entries replayed between two rewrites of the journal: bounds the (idempotent) work redone after a crash
without rewriting a long journal after every entry."""


class JournalReplay(PrimaryHealth):
    """The journal replay of `ResilientStore` (see the module docstring); not used on its own."""

    journal: WriteJournal
    _primary: LongTermStore | None
    _pending: dict[UUID, UUID]
    _pending_users: Counter[UUID]
    _refusals: Counter[UUID]
    _replay_lock: asyncio.Lock
    _work: asyncio.Event
    _recovered: asyncio.Event
    _retry_base: float
    _retry_max: float
    _rng: random.Random
    _connect: Callable[[], Coroutine[Any, Any, LongTermStore]] | None
    _connect_lock: asyncio.Lock
    _connecting: asyncio.Task[LongTermStore] | None
    _primary_name: str
    replayed_writes: int
    replay_failures: int
    rejected_writes: int

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
        """(write ids done with, how many the database applied, whether all of `entries` were done with).

        An outage stops the pass. A user whose entry must wait (over the write rate, or refused and not yet
        set aside) is held: that user's later entries wait behind it (order), everyone else's go on."""
        done: list[UUID] = []
        applied = 0
        held: set[UUID] = set()
        for entry in entries:
            if entry.user_id in held:
                continue
            finished, count, state = await self._replay_entry(primary, entry)
            done += finished
            applied += count
            if state == "down":
                return done, applied, False
            if state == "held":
                held.add(entry.user_id)
        return done, applied, not held

    async def _replay_entry(self, primary: LongTermStore, entry: JournalEntry) -> tuple[list[UUID], int, _State]:
        """Replay one entry: (write ids done with, entries applied, "done", "held" or "down")."""
        try:
            await primary.upsert(entry.user_id, entry.items, entry.rules, write_id=entry.write_id)
        except StoreUnavailableError as exc:
            self.replay_failures += 1
            self._failed("replaying the journal", exc)
            return [], 0, "down"
        except StatementLimitError as exc:
            # Reachable, and this entry is over a limit: every replay of it whole would fail the same way (and
            # hold the replay for the whole timeout). It was acknowledged, so it is applied in halves (each
            # with its own write id, the split made durable first); a single item over the limit is set aside
            # with the reason, and the journal goes on.
            self.replay_failures += 1
            if len(entry.items) < 2:
                await self._set_aside(entry, exc, attempts=1)
                return [entry.write_id], 0, "done"
            return await self._replay_halves(primary, entry)
        except StoreError as exc:
            self.replay_failures += 1
            if isinstance(exc, MemoryLimitError) and exc.retry_after is not None:
                # The user's write rate (the database's token bucket): the entry is fine, it must wait.
                logger.info("%s replay of user %s waits for the write rate: %s", LOG_PREFIX, entry.user_id, exc)
                return [], 0, "held"
            if not await self._refused(entry, exc):
                return [], 0, "held"
            return [entry.write_id], 0, "done"
        self.replayed_writes += 1
        self._refusals.pop(entry.write_id, None)
        self._succeeded()
        return [entry.write_id], 1, "done"

    async def _replay_halves(self, primary: LongTermStore, entry: JournalEntry) -> tuple[list[UUID], int, _State]:
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
            finished, count, state = await self._replay_entry(primary, part)
            done += finished
            applied += count
            if state != "done":
                return done, applied, state
        return done, applied, "done"

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
