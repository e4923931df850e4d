"""`PostgresSessionStore`: short-term sessions in `memory_private.memory_sessions`, shared by every worker process.

The same contract as the RAM `SessionStore` (`session/base.py`): a window of the last `max_messages` messages,
entities merged once per kind (case- and accent-insensitively), intents once, an inactivity TTL, a per-user
session cap (the user's least recently active sessions go first), and the owner rules (sessions keyed by
(session id, owner), `resolve_owner` for the calls without a user). Each operation is one transaction that
locks the session's row (`select … for update`, or the `update` that writes it), so two processes appending to one
session serialise: no message is lost.

Each call is one transaction in at most two round trips (`postgres_sql.py`): a read, a drop, and a message
appended (with its user, or without one to the id's one live session) are one statement after the role switch,
in one round trip (two when the session is new); a write whose new state is computed here (entities merged
case- and accent-insensitively, intents, their limits; without a user, resolved by `resolve_owner`) locks in
one round trip and writes and commits in the next. Four round trips (begin, lock, write, commit) on the shared
pool took 1.24-1.38x the time of a synchronous pool's call through the manager; one takes 0.92-0.98x
(`bench.session_calls`, docs/chats.md).

On the pool it is given: the manager's assembly hands it the one async pool of the process (the store's role;
each transaction switches to `memory_worker`, transaction-locally), and never has it close that pool; the
manager, the extraction runner and the sweeper await its calls on that loop (`on_loop`: no worker thread).
`connect(url)` opens a pool of its own on a loop thread of its own (tests, tools, other processes); the
synchronous `SessionBackend` calls run their transaction on the pool's loop and wait; made on that loop itself,
they raise (the wait would never end): code on the loop awaits `on_loop`'s calls.
Time is seconds of `clock` (wall time by default, shared across processes).
Not implemented here: the RAM store's byte budgets (the per-user session cap bounds a user instead).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar
from uuid import UUID

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ..database.calls import postgres_errors
from ..database.pooler import PoolerMode, connection_kwargs
from ..database.reach import open_pool
from ..models import Message, ShortTermMemory
from ..settings import MemorySettings
from .base import SessionLimits, resolve_owner, session_limits
from .postgres_sql import (
    APPEND_ANY_SQL,
    APPEND_SQL,
    CAP_SQL,
    COUNT_SQL,
    DELETE_SQL,
    EXPIRE_SQL,
    EXPIRED_SQL,
    INSERT_SQL,
    LOCK_ID_SQL,
    LOCK_KEY_SQL,
    OWNERS_SQL,
    SNAPSHOT_SQL,
    WRITE_SQL,
    Conn,
    Result,
    commit_after,
    one_message,
    open_locked,
)

__all__ = ["PostgresSessionCalls", "PostgresSessionStore", "postgres_sessions_from_settings"]

T = TypeVar("T")

Pool = AsyncConnectionPool[Conn]
"""An async pool with rows as dicts: the assembly's one pool, or one of the store's own (`connect`)."""

State = dict[str, Any]
"""A session's state as stored: messages (JSON), entities (kind -> values), intents, messages_seen."""


def _state(live: Mapping[str, Any] | None) -> State:
    """The live row's state, or a new session's."""
    if live is None:
        return {"messages": [], "entities": {}, "intents": [], "messages_seen": 0}
    return {k: live[k] for k in ("messages", "entities", "intents", "messages_seen")}


def _state_params(session_id: str, owner: UUID | None, state: State, now: float) -> dict[str, Any]:
    return {
        "sid": session_id,
        "uid": owner,
        "messages": json.dumps(state["messages"], ensure_ascii=False),
        "entities": json.dumps(state["entities"], ensure_ascii=False),
        "intents": json.dumps(state["intents"], ensure_ascii=False),
        "seen": state["messages_seen"],
        "now": now,
    }


def _raced(session_id: str) -> RuntimeError:  # pragma: no cover - another process dropped it each time
    return RuntimeError(f"session {session_id!r} was created and dropped by another process three times in a row")


class Change(NamedTuple, Generic[T]):
    """What a locked write decided: its result, and the session's new state (None: nothing to write)."""

    result: T
    state: State | None = None


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

    # --- one transaction per operation, in at most two round trips (`postgres_sql.py`) ----------------------
    def _call(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        """Run `op(conn)` on a connection of the pool, on the pool's loop, and wait."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # Waiting here for the loop that must run the call would never end.
            raise RuntimeError(
                "a synchronous PostgresSessionStore call on the event loop of its pool: await the same call of"
                " `store.on_loop` (or `memory_plugin.session.session_calls(store)`) instead"
            )
        return asyncio.run_coroutine_threadsafe(self._pooled(op), self._loop).result()

    async def _pooled(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        with postgres_errors("the session operation"):  # typed: unreachable, over a limit, refused
            async with self._pool.connection() as conn:
                return await op(conn)

    async def _message(self, conn: Conn, statements: list[str], params: Mapping[str, Any]) -> list[Result]:
        """`statements` in one round trip and one transaction (as `memory_worker` on a shared pool)."""
        return await one_message(conn, statements, params, worker_role=self._worker_role)

    def _live_owners(self, rows: Iterable[Mapping[str, Any]], now: float) -> set[UUID | None]:
        return {row["user_id"] for row in rows if row["last_active"] > now - self.ttl_seconds}

    async def _locked(
        self, conn: Conn, session_id: str, user_id: UUID | None, change: Callable[[dict[str, Any] | None], Change[T]]
    ) -> T:
        """A write whose new state is computed here, in two round trips: `begin`, the role and the lock of the
        session's row (every owner's row of the id without a user, resolved by `resolve_owner`); then the new
        state written (`change` of the live state, None when new or expired) and `commit`. A session another
        process created between the two is met on the next try, locked."""
        for _ in range(3):
            now = self._clock()
            key = {"sid": session_id, "uid": user_id}
            lock = LOCK_KEY_SQL if user_id is not None else LOCK_ID_SQL
            rows = await open_locked(conn, lock, key, worker_role=self._worker_role)
            try:
                owner = user_id
                if user_id is None:
                    owner = resolve_owner(session_id, None, self._live_owners(rows, now), write=True)
                row = next((r for r in rows if r["user_id"] == owner), None)
                live = row if row is not None and row["last_active"] > now - self.ttl_seconds else None
                outcome = change(live)
                statements, params = self._writes(session_id, owner, row is not None, outcome.state, now)
                results = await commit_after(conn, statements, params)
            except BaseException:
                if not conn.closed:
                    await conn.execute("rollback")
                raise
            if row is not None or outcome.state is None or results[-1][1] == 1:
                return outcome.result
        raise _raced(session_id)  # pragma: no cover

    def _writes(
        self, session_id: str, owner: UUID | None, exists: bool, state: State | None, now: float
    ) -> tuple[list[str], dict[str, Any]]:
        """The statements that store `state` for (session_id, owner): an update of the locked row (a live one,
        or an expired one replaced by the new session), else room made under the user's cap and an insert."""
        if state is None:
            return [], {}
        params = _state_params(session_id, owner, state, now)
        if exists:
            return [WRITE_SQL], params
        if owner is None:
            return [INSERT_SQL], params
        return [CAP_SQL, INSERT_SQL], {**params, "keep": self.max_sessions_per_user - 1}

    async def _created(self, conn: Conn, session_id: str, owner: UUID | None, state: State, now: float) -> bool:
        """Insert a new session with `state` (after making room under the owner's cap), as one transaction;
        False when another process created it first."""
        statements, params = self._writes(session_id, owner, False, state, now)
        results = await self._message(conn, statements, params)
        return results[-1][1] == 1

    # --- the operations, each on one connection ----------------------------------------------------------------
    async def _add_message(self, conn: Conn, session_id: str, message: Message, user_id: UUID | None) -> int:
        """One statement appends and trims the window (one round trip; a new session, two): to the user's
        session, or without a user to the one live session of the id (its owners read in the same transaction
        when none or two are live: a new anonymous session, or `SessionAmbiguousError`)."""
        dumped = message.model_dump(mode="json")
        text = json.dumps([dumped], ensure_ascii=False)
        first = {**_state(None), "messages": [dumped], "messages_seen": 1}
        for _ in range(3):
            now = self._clock()
            params = {"sid": session_id, "uid": user_id, "messages": text, "now": now}
            params.update(cutoff=now - self.ttl_seconds, max=self.max_messages)
            if user_id is not None:
                rows = (await self._message(conn, [APPEND_SQL], params))[0][0]
                created = [] if rows else [CAP_SQL, INSERT_SQL]
            else:
                (rows, _), (owners, _) = await self._message(conn, [APPEND_ANY_SQL, OWNERS_SQL], params)
                if not rows and resolve_owner(session_id, None, self._live_owners(owners, now), write=True) is None:
                    created = [EXPIRED_SQL, INSERT_SQL]  # a new anonymous session (an expired one makes room)
                else:
                    created = []  # appended; or its one owner's session went live meanwhile: once more
            if rows:
                return int(rows[0]["messages_seen"])
            if created:
                params.update(_state_params(session_id, user_id, first, now), keep=self.max_sessions_per_user - 1)
                if (await self._message(conn, created, params))[-1][1] == 1:
                    return 1
        raise _raced(session_id)  # pragma: no cover

    async def _update_entities(
        self, conn: Conn, session_id: str, entities: Mapping[str, str | Iterable[str]], user_id: UUID | None
    ) -> None:
        def merged(live: dict[str, Any] | None) -> Change[None]:
            state = _state(live)
            # Stored as kind -> values in first-seen order (a jsonb object would not keep key order).
            return Change(None, {**state, "entities": self.merged_entities(session_id, state["entities"], entities)})

        await self._locked(conn, session_id, user_id, merged)

    async def _add_intent(self, conn: Conn, session_id: str, intent: str, user_id: UUID | None) -> None:
        text = intent.strip()

        def added(live: dict[str, Any] | None) -> Change[None]:
            state = _state(live)
            self.check_intent_room(session_id, state["intents"], text)
            intents = state["intents"] if text in state["intents"] else [*state["intents"], text]
            return Change(None, {**state, "intents": intents})

        await self._locked(conn, session_id, user_id, added)

    async def _snapshot(self, conn: Conn, session_id: str, user_id: UUID | None, bind: bool) -> ShortTermMemory:
        """One round trip: the live session touched and returned (without a user, the anonymous one, and the
        id's owners to refuse a user's session); binding a new session to its user, one more."""
        now = self._clock()
        key = {"sid": session_id, "uid": user_id, "now": now, "cutoff": now - self.ttl_seconds}
        if user_id is not None:
            rows = (await self._message(conn, [SNAPSHOT_SQL], key))[0][0]
        else:
            (owners, _), (rows, _) = await self._message(conn, [OWNERS_SQL, SNAPSHOT_SQL], key)
            if not rows:
                resolve_owner(session_id, None, self._live_owners(owners, now), write=False)
        if rows:
            row = rows[0]
            return ShortTermMemory(
                messages=[Message.model_validate(m) for m in row["messages"]],
                entities={kind: list(values) for kind, values in row["entities"].items()},
                intents=list(row["intents"]),
            )
        if bind and user_id is not None:
            statements, params = self._writes(session_id, user_id, False, _state(None), now)
            await self._message(conn, [EXPIRED_SQL, *statements], {**key, **params})
        return ShortTermMemory()

    async def _owned_row(self, conn: Conn, session_id: str, user_id: UUID | None, now: float) -> dict[str, Any] | None:
        """The live row a read means (one round trip, nothing locked)."""
        rows = (await self._message(conn, [OWNERS_SQL], {"sid": session_id}))[0][0]
        owner = resolve_owner(session_id, user_id, self._live_owners(rows, now), write=False)
        cutoff = now - self.ttl_seconds
        return next((r for r in rows if r["user_id"] == owner and r["last_active"] > cutoff), None)

    async def _messages_seen(self, conn: Conn, session_id: str, user_id: UUID | None) -> int:
        row = await self._owned_row(conn, session_id, user_id, self._clock())
        return int(row["messages_seen"]) if row else 0

    async def _drop(self, conn: Conn, session_id: str, user_id: UUID | None) -> bool:
        """One round trip: the session deleted (without a user, the anonymous one, after the id's owners are
        read in the same transaction to refuse a user's session); whether a live one existed."""
        now = self._clock()
        key = {"sid": session_id, "uid": user_id}
        if user_id is not None:
            rows = (await self._message(conn, [DELETE_SQL], key))[0][0]
        else:
            (owners, _), (rows, _) = await self._message(conn, [OWNERS_SQL, DELETE_SQL], key)
            if not any(row["last_active"] > now - self.ttl_seconds for row in rows):
                resolve_owner(session_id, None, self._live_owners(owners, now), write=False)
        return any(row["last_active"] > now - self.ttl_seconds for row in rows)

    async def _live(self, conn: Conn) -> int:
        rows = (await self._message(conn, [COUNT_SQL], {"cutoff": self._clock() - self.ttl_seconds}))[0][0]
        return int(rows[0]["live"]) if rows else 0

    async def _expire(self, conn: Conn) -> int:
        return (await self._message(conn, [EXPIRE_SQL], {"cutoff": self._clock() - self.ttl_seconds}))[0][1]

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
    """`SessionCalls` (`session/calls.py`) of a `PostgresSessionStore` on the running loop's pool: each call one
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

    async def expire(self) -> int:
        """See `PostgresSessionStore.expire`."""
        return await self._store._pooled(self._store._expire)

    async def live(self) -> int:
        """See `PostgresSessionStore.__len__`."""
        return await self._store._pooled(self._store._live)


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
