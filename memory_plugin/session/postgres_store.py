"""`PostgresSessionStore`: short-term sessions in `memory_private.memory_sessions`, shared by every worker process.

The same contract as the RAM `SessionStore` (`session/base.py`): a window of the last `max_messages` messages,
entities merged once per kind (case- and accent-insensitively), intents once, an inactivity TTL, a per-user
session cap (the user's least recently active sessions go first), and the owner rules (sessions keyed by
(session id, owner), `resolve_owner` for the calls without a user). Each operation is one transaction that
locks the session's row (`select … for update`, or the read's own `update`), so two processes appending to one
session serialise: no message is lost.

On the pool it is given: the manager's assembly hands it the one async pool of the process (the store's role;
each transaction switches to `memory_worker`, transaction-locally), and never has it close that pool;
`connect(url)` opens a pool of its own on a loop thread of its own (tests, tools, other processes). The
`SessionBackend` protocol is synchronous: the manager calls it in a worker thread (`blocking`, `off_the_loop`),
and each call runs its transaction on the pool's event loop (a few statements, about a millisecond on the same
host). A synchronous call made on that loop itself (`describe()`'s session count) uses a one-off connection.
Time is seconds of `clock` (wall time by default, shared across processes).
Not implemented here: the RAM store's byte budgets (the per-user session cap bounds a user instead).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ..database.pooler import PoolerMode, connection_kwargs
from ..database.reach import open_pool
from ..models import Message, ShortTermMemory
from ..settings import MemorySettings
from .base import SessionLimits, resolve_owner, session_limits

__all__ = ["PostgresSessionStore", "postgres_sessions_from_settings"]

T = TypeVar("T")

Conn = psycopg.AsyncConnection[dict[str, Any]]
Pool = AsyncConnectionPool[Conn]
"""An async pool with rows as dicts: the assembly's one pool, or one of the store's own (`connect`)."""

_T = "memory_private.memory_sessions"
BEGIN_SQL = "begin"
BEGIN_AS_WORKER_SQL = "begin; select set_config('role', 'memory_worker', true)"
"""A transaction on a shared pool runs as `memory_worker` (transaction-local, as the job queue's): one round
trip with its `begin` (no parameters: one simple-query message)."""
# Every statement names the session by (session id, owner): `user_id is not distinct from` matches the anonymous
# owner (null) too, and the unique (session_id, user_id) index finds the rows of the id first.
_KEY = "session_id = %(sid)s and user_id is not distinct from %(uid)s"
LOCK_SQL = f"select * from {_T} where {_KEY} for update"
# The owners of a session id, locked (a call without a user resolves among them).
OWNERS_SQL = f"select user_id, last_active from {_T} where session_id = %(sid)s for update"
CREATE_SQL = (
    f"insert into {_T} (session_id, user_id, last_active) values (%(sid)s, %(uid)s, %(now)s)"
    " on conflict (session_id, user_id) do nothing"
)
WRITE_SQL = (
    f"update {_T} set messages = %(messages)s::jsonb, entities = %(entities)s::jsonb, intents = %(intents)s::jsonb,"
    f" messages_seen = %(seen)s, last_active = %(now)s where {_KEY}"
)
# A read that counts as activity: the live session touched and returned by one statement (its row lock as
# `for update`'s).
SNAPSHOT_SQL = (
    f"update {_T} set last_active = %(now)s where {_KEY} and last_active > %(cutoff)s"
    " returning messages, entities, intents"
)
DELETE_SQL = f"delete from {_T} where {_KEY}"
EXPIRED_SQL = f"delete from {_T} where session_id = %(sid)s and last_active <= %(cutoff)s"
COUNT_SQL = f"select count(*) as live from {_T} where last_active > %s"
EXPIRE_SQL = f"delete from {_T} where last_active <= %s"
# The user's sessions beyond the cap, least recently active first (made room for before creating one).
CAP_SQL = (
    f"delete from {_T} where user_id = %(uid)s and session_id in (select session_id from {_T}"
    " where user_id = %(uid)s order by last_active desc offset %(keep)s)"
)


class PostgresSessionStore(SessionLimits):
    """A `SessionBackend` on PostgreSQL, on the async pool it is given (`pool`, whose event loop is `loop`), or
    on one of its own with `PostgresSessionStore.connect(url, ...)`; `close()` at the end."""

    blocking: bool = True
    """Always: every call is a transaction on Postgres (`off_the_loop` runs it in a worker thread)."""

    def __init__(
        self,
        pool: Pool,
        loop: asyncio.AbstractEventLoop,
        *,
        worker_role: bool = True,
        max_messages: int = 20,
        ttl_seconds: float = 3600.0,
        max_sessions_per_user: int = 100,
        max_entity_values_per_kind: int = 50,
        max_entity_values: int = 200,
        max_intents: int = 50,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            max_messages=max_messages,
            ttl_seconds=ttl_seconds,
            max_sessions_per_user=max_sessions_per_user,
            max_entity_values_per_kind=max_entity_values_per_kind,
            max_entity_values=max_entity_values,
            max_intents=max_intents,
        )
        self._pool = pool
        self._loop = loop
        self._worker_role = worker_role
        """Switch each transaction to `memory_worker` (a pool whose login role is another)."""
        self._clock = clock
        self._own_loop: threading.Thread | None = None
        """The loop thread of a store that opened its own pool (`connect`): stopped by `close`."""

    @classmethod
    def connect(
        cls, url: str, *, max_size: int = 4, pooler: PoolerMode = "auto", connect_timeout: float = 10.0, **limits: Any
    ) -> PostgresSessionStore:
        """A store on a new pool to `url` (the service path: its role enforces nothing, this class does;
        `pooler`: see `database.pooler`), run on a loop thread of the store's own; a database it cannot reach within
        `connect_timeout` seconds raises `StoreUnavailableError` naming the cause."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="memory_plugin-sessions", daemon=True)
        thread.start()
        kwargs = {"row_factory": dict_row, "autocommit": True, **connection_kwargs(url, pooler)}

        async def opened() -> Pool:
            pool: Pool = AsyncConnectionPool(url, min_size=1, max_size=max_size, open=False, kwargs=kwargs)
            await open_pool(pool, url, seconds=connect_timeout, what="the session store ")  # names the cause
            return pool

        try:
            pool = asyncio.run_coroutine_threadsafe(opened(), loop).result()
        except BaseException:
            _stop(loop, thread)
            raise
        store = cls(pool, loop, worker_role=False, **limits)
        store._own_loop = thread
        return store

    def close(self) -> None:
        """Close the pool the store opened (`connect`); a pool it was given is its owner's to close."""
        if self._own_loop is None:
            return
        thread, self._own_loop = self._own_loop, None
        try:
            asyncio.run_coroutine_threadsafe(self._pool.close(), self._loop).result()
        finally:
            _stop(self._loop, thread)

    # --- one locked transaction per operation -------------------------------------------------------------------
    def _call(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        """Run `op(conn)` in one transaction (as `memory_worker` on a shared pool) on the pool's loop, and wait."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            return asyncio.run_coroutine_threadsafe(self._pooled(op), self._loop).result()
        # Called on the pool's own loop (a synchronous caller such as `describe()`): waiting for that loop here
        # would never end, so a one-off connection in a thread of its own serves the call.
        with ThreadPoolExecutor(1, thread_name_prefix="memory_plugin-sessions") as thread:
            return thread.submit(asyncio.run, self._one_off(op)).result()

    async def _pooled(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        async with self._pool.connection() as conn:
            return await self._transaction(conn, op)

    async def _one_off(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        kwargs = dict(self._pool.kwargs) if isinstance(self._pool.kwargs, dict) else {}
        kwargs.update(row_factory=dict_row, autocommit=True)
        info = self._pool.conninfo
        conninfo = info if isinstance(info, str) else info()  # a pool may compute its conninfo per connection
        if not isinstance(conninfo, str):
            conninfo = await conninfo
        async with await psycopg.AsyncConnection.connect(conninfo, **kwargs) as conn:
            return await self._transaction(conn, op)

    async def _transaction(self, conn: Conn, op: Callable[[Conn], Awaitable[T]]) -> T:
        """`op(conn)` in one transaction on an autocommit connection (as `memory_worker` on a shared pool)."""
        await conn.execute(BEGIN_AS_WORKER_SQL if self._worker_role else BEGIN_SQL)
        try:
            result = await op(conn)
        except BaseException:
            if not conn.closed:
                await conn.execute("rollback")
            raise
        await conn.execute("commit")
        return result

    async def _owner(
        self, conn: Conn, session_id: str, user_id: UUID | None, now: float, *, write: bool
    ) -> UUID | None:
        """The owner of the session the call means (`resolve_owner`); without a user, the id's rows stay locked
        for the transaction, so the resolution holds until it commits."""
        if user_id is not None:
            return user_id
        rows = await (await conn.execute(OWNERS_SQL, {"sid": session_id})).fetchall()
        live = {row["user_id"] for row in rows if row["last_active"] > now - self.ttl_seconds}
        return resolve_owner(session_id, None, live, write=write)

    async def _locked(self, conn: Conn, session_id: str, owner: UUID | None, now: float) -> dict[str, Any] | None:
        """The live session's row, locked; an expired one is deleted (its id is free for that owner)."""
        key = {"sid": session_id, "uid": owner}
        row = await (await conn.execute(LOCK_SQL, key)).fetchone()
        if row is not None and row["last_active"] <= now - self.ttl_seconds:
            await conn.execute(DELETE_SQL, key)
            row = None
        return row

    async def _create(self, conn: Conn, session_id: str, owner: UUID | None, now: float) -> dict[str, Any]:
        if owner is not None:
            await conn.execute(CAP_SQL, {"uid": owner, "keep": self.max_sessions_per_user - 1})
        key = {"sid": session_id, "uid": owner, "now": now}
        await conn.execute(CREATE_SQL, key)
        # Another process may have created it first: lock whatever is there.
        row = await self._locked(conn, session_id, owner, now)
        if row is None:  # pragma: no cover - it expired between the two statements
            await conn.execute(CREATE_SQL, key)
            row = await (await conn.execute(LOCK_SQL, key)).fetchone()
        assert row is not None
        return row

    async def _session(self, conn: Conn, session_id: str, user_id: UUID | None, now: float) -> dict[str, Any]:
        """The session a write means, locked, created if new."""
        owner = await self._owner(conn, session_id, user_id, now, write=True)
        return await self._locked(conn, session_id, owner, now) or await self._create(conn, session_id, owner, now)

    async def _write(self, conn: Conn, row: dict[str, Any], now: float) -> None:
        await conn.execute(
            WRITE_SQL,
            {
                "messages": json.dumps(row["messages"], ensure_ascii=False),
                "entities": json.dumps(row["entities"], ensure_ascii=False),
                "intents": json.dumps(row["intents"], ensure_ascii=False),
                "seen": row["messages_seen"],
                "now": now,
                "sid": row["session_id"],
                "uid": row["user_id"],
            },
        )

    # --- the operations, each on one connection inside its transaction -------------------------------------------
    async def _add_message(self, conn: Conn, session_id: str, message: Message, user_id: UUID | None) -> int:
        now = self._clock()
        row = await self._session(conn, session_id, user_id, now)
        messages = [*row["messages"], message.model_dump(mode="json")][-self.max_messages :]
        row = {**row, "messages": messages, "messages_seen": row["messages_seen"] + 1}
        await self._write(conn, row, now)
        return int(row["messages_seen"])

    async def _update_entities(
        self, conn: Conn, session_id: str, entities: Mapping[str, str | Iterable[str]], user_id: UUID | None
    ) -> None:
        now = self._clock()
        owner = await self._owner(conn, session_id, user_id, now, write=True)
        existing = await self._locked(conn, session_id, owner, now)
        # Stored as kind -> values in first-seen order (a jsonb object would not keep key order).
        merged = self.merged_entities(session_id, existing["entities"] if existing else {}, entities)
        row = existing or await self._create(conn, session_id, owner, now)
        await self._write(conn, {**row, "entities": merged}, now)

    async def _add_intent(self, conn: Conn, session_id: str, intent: str, user_id: UUID | None) -> None:
        text = intent.strip()
        now = self._clock()
        owner = await self._owner(conn, session_id, user_id, now, write=True)
        existing = await self._locked(conn, session_id, owner, now)
        if existing is not None:
            self.check_intent_room(session_id, existing["intents"], text)
        row = existing or await self._create(conn, session_id, owner, now)
        intents = row["intents"] if text in row["intents"] else [*row["intents"], text]
        await self._write(conn, {**row, "intents": intents}, now)

    async def _snapshot(self, conn: Conn, session_id: str, user_id: UUID | None, bind: bool) -> ShortTermMemory:
        now = self._clock()
        owner = await self._owner(conn, session_id, user_id, now, write=False)
        key = {"sid": session_id, "uid": owner, "now": now, "cutoff": now - self.ttl_seconds}
        row = await (await conn.execute(SNAPSHOT_SQL, key)).fetchone()
        if row is None:
            if bind and user_id is not None:
                await conn.execute(EXPIRED_SQL, key)
                await self._create(conn, session_id, user_id, now)
            return ShortTermMemory()
        return ShortTermMemory(
            messages=[Message.model_validate(m) for m in row["messages"]],
            entities={kind: list(values) for kind, values in row["entities"].items()},
            intents=list(row["intents"]),
        )

    async def _messages_seen(self, conn: Conn, session_id: str, user_id: UUID | None) -> int:
        now = self._clock()
        owner = await self._owner(conn, session_id, user_id, now, write=False)
        row = await self._locked(conn, session_id, owner, now)
        return int(row["messages_seen"]) if row else 0

    async def _drop(self, conn: Conn, session_id: str, user_id: UUID | None) -> bool:
        now = self._clock()
        owner = await self._owner(conn, session_id, user_id, now, write=False)
        if await self._locked(conn, session_id, owner, now) is None:
            return False
        await conn.execute(DELETE_SQL, {"sid": session_id, "uid": owner})
        return True

    async def _live(self, conn: Conn) -> int:
        row = await (await conn.execute(COUNT_SQL, (self._clock() - self.ttl_seconds,))).fetchone()
        return int(row["live"]) if row else 0

    async def _expire(self, conn: Conn) -> int:
        return int((await conn.execute(EXPIRE_SQL, (self._clock() - self.ttl_seconds,))).rowcount)

    # --- SessionBackend ------------------------------------------------------------------------------------------
    @property
    def on_loop(self) -> PostgresSessionCalls | None:
        """The same operations as coroutines on the event loop that owns the pool (the manager's, on the
        assembly's pool), so a call needs no worker thread; None when the store runs its own loop (`connect`)."""
        return PostgresSessionCalls(self) if self._own_loop is None else None

    def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """Append `message` (creating the session, bound to `user_id`); returns the messages it has seen."""
        return self._call(lambda conn: self._add_message(conn, session_id, message, user_id))

    def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """Merge entity values by kind, without duplicates; all or nothing past the limits."""
        self._call(lambda conn: self._update_entities(conn, session_id, entities, user_id))

    def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """Record an intent (once, first-seen order); a new one past `max_intents` raises `SessionLimitError`."""
        self._call(lambda conn: self._add_intent(conn, session_id, intent, user_id))

    def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """A copy of the session's state (empty when unknown or expired); counts as activity. With `bind` and a
        `user_id`, an unknown session is created for that user."""
        return self._call(lambda conn: self._snapshot(conn, session_id, user_id, bind))

    def messages_seen(self, session_id: str, *, user_id: UUID | None = None) -> int:
        """Messages the session has seen in total (0 when unknown or expired)."""
        return self._call(lambda conn: self._messages_seen(conn, session_id, user_id))

    def drop(self, session_id: str, *, user_id: UUID | None = None) -> bool:
        """Forget the session now; returns whether it existed."""
        return self._call(lambda conn: self._drop(conn, session_id, user_id))

    def __len__(self) -> int:
        """Live sessions (all users)."""
        return self._call(self._live)

    def expire(self) -> int:
        """Delete every session idle for longer than the TTL; returns how many."""
        return self._call(self._expire)


class PostgresSessionCalls:
    """`SessionCalls` (`session/base.py`) of a `PostgresSessionStore` on the running loop's pool: each call one
    transaction awaited on the loop, with no worker thread."""

    __slots__ = ("_store",)

    def __init__(self, store: PostgresSessionStore) -> None:
        self._store = store

    async def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """See `PostgresSessionStore.add_message`."""
        store = self._store
        return await store._pooled(lambda conn: store._add_message(conn, session_id, message, user_id))

    async def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """See `PostgresSessionStore.update_entities`."""
        store = self._store
        await store._pooled(lambda conn: store._update_entities(conn, session_id, entities, user_id))

    async def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """See `PostgresSessionStore.add_intent`."""
        store = self._store
        await store._pooled(lambda conn: store._add_intent(conn, session_id, intent, user_id))

    async def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """See `PostgresSessionStore.snapshot`."""
        store = self._store
        return await store._pooled(lambda conn: store._snapshot(conn, session_id, user_id, bind))


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def postgres_sessions_from_settings(
    settings: MemorySettings, url: str | None = None, *, pool: Pool | None = None
) -> PostgresSessionStore:
    """The Postgres session store `settings` describe (window, TTL, per-user cap, entity and intent limits): on
    `pool` (the assembly's one pool; call from its event loop), else on a pool of its own to `url`."""
    if pool is not None:
        return PostgresSessionStore(pool, asyncio.get_running_loop(), **session_limits(settings))
    if url is None:
        raise ValueError("postgres_sessions_from_settings needs a pool or a URL")
    return PostgresSessionStore.connect(url, pooler=settings.database_pooler, **session_limits(settings))
