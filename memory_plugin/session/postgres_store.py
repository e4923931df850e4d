"""`PostgresSessionStore`: short-term sessions in `memory_private.memory_sessions`, shared by every worker process.

The same contract as the RAM `SessionStore` (`session/base.py`): a window of the last `max_messages` messages,
entities merged once per kind (case- and accent-insensitively), intents once, an inactivity TTL, a per-user
session cap (the user's least recently active sessions go first), and the owner rules (sessions keyed by
(session id, owner), `resolve_owner` for the calls without a user). Each operation is one transaction that
locks the session's row (`select … for update`, or the read's own `update`), so two processes appending to one
session serialise: no message is lost.

Synchronous, like the `SessionBackend` protocol: each call is a few statements on a local pool (about a
millisecond on the same host); the manager runs each one in a worker thread (`blocking`, `off_the_loop`).
Time is seconds of `clock` (wall time by default, shared across processes).
Not implemented here: the RAM store's byte budgets (the per-user session cap bounds a user instead).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ..database.pooler import PoolerMode, connection_kwargs
from ..database.reach import open_sync_pool
from ..models import Message, ShortTermMemory
from ..settings import MemorySettings
from .base import SessionLimits, resolve_owner, session_limits

__all__ = ["PostgresSessionStore", "postgres_sessions_from_settings"]

Conn = psycopg.Connection[dict[str, Any]]

_T = "memory_private.memory_sessions"
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
    """A `SessionBackend` on PostgreSQL. Create with `PostgresSessionStore.connect(url, ...)`; `close()` at the end."""

    blocking: bool = True
    """Always: every call is a transaction on Postgres (`off_the_loop` runs it in a worker thread)."""

    def __init__(
        self,
        pool: ConnectionPool[Conn],
        *,
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
        self._clock = clock

    @classmethod
    def connect(
        cls, url: str, *, max_size: int = 4, pooler: PoolerMode = "auto", connect_timeout: float = 10.0, **limits: Any
    ) -> PostgresSessionStore:
        """A store on a new pool to `url` (the service path: its role enforces nothing, this class does;
        `pooler`: see `database.pooler`)."""
        kwargs = {"row_factory": dict_row, **connection_kwargs(url, pooler)}
        pool: ConnectionPool[Conn] = ConnectionPool(url, min_size=1, max_size=max_size, open=False, kwargs=kwargs)
        open_sync_pool(pool, url, seconds=connect_timeout, what="the session store ")  # names the cause
        return cls(pool, **limits)

    def close(self) -> None:
        """Close the pool."""
        self._pool.close()

    # --- one locked transaction per operation -------------------------------------------------------------------
    def _owner(self, conn: Conn, session_id: str, user_id: UUID | None, now: float, *, write: bool) -> UUID | None:
        """The owner of the session the call means (`resolve_owner`); without a user, the id's rows stay locked
        for the transaction, so the resolution holds until it commits."""
        if user_id is not None:
            return user_id
        rows = conn.execute(OWNERS_SQL, {"sid": session_id}).fetchall()
        live = {row["user_id"] for row in rows if row["last_active"] > now - self.ttl_seconds}
        return resolve_owner(session_id, None, live, write=write)

    def _locked(self, conn: Conn, session_id: str, owner: UUID | None, now: float) -> dict[str, Any] | None:
        """The live session's row, locked; an expired one is deleted (its id is free for that owner)."""
        key = {"sid": session_id, "uid": owner}
        row = conn.execute(LOCK_SQL, key).fetchone()
        if row is not None and row["last_active"] <= now - self.ttl_seconds:
            conn.execute(DELETE_SQL, key)
            row = None
        return row

    def _create(self, conn: Conn, session_id: str, owner: UUID | None, now: float) -> dict[str, Any]:
        if owner is not None:
            conn.execute(CAP_SQL, {"uid": owner, "keep": self.max_sessions_per_user - 1})
        key = {"sid": session_id, "uid": owner, "now": now}
        conn.execute(CREATE_SQL, key)
        # Another process may have created it first: lock whatever is there.
        row = self._locked(conn, session_id, owner, now)
        if row is None:  # pragma: no cover - it expired between the two statements
            conn.execute(CREATE_SQL, key)
            row = conn.execute(LOCK_SQL, key).fetchone()
        assert row is not None
        return row

    def _session(self, conn: Conn, session_id: str, user_id: UUID | None, now: float) -> dict[str, Any]:
        """The session a write means, locked, created if new."""
        owner = self._owner(conn, session_id, user_id, now, write=True)
        return self._locked(conn, session_id, owner, now) or self._create(conn, session_id, owner, now)

    def _write(self, conn: Conn, row: dict[str, Any], now: float) -> None:
        conn.execute(
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

    def _transaction(self) -> Any:
        return self._pool.connection()

    # --- SessionBackend ------------------------------------------------------------------------------------------
    def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """Append `message` (creating the session, bound to `user_id`); returns the messages it has seen."""
        now = self._clock()
        with self._transaction() as conn:
            row = self._session(conn, session_id, user_id, now)
            messages = [*row["messages"], message.model_dump(mode="json")][-self.max_messages :]
            row = {**row, "messages": messages, "messages_seen": row["messages_seen"] + 1}
            self._write(conn, row, now)
            return int(row["messages_seen"])

    def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """Merge entity values by kind, without duplicates; all or nothing past the limits."""
        now = self._clock()
        with self._transaction() as conn:
            owner = self._owner(conn, session_id, user_id, now, write=True)
            existing = self._locked(conn, session_id, owner, now)
            # Stored as kind -> values in first-seen order (a jsonb object would not keep key order).
            merged = self.merged_entities(session_id, existing["entities"] if existing else {}, entities)
            row = existing or self._create(conn, session_id, owner, now)
            self._write(conn, {**row, "entities": merged}, now)

    def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """Record an intent (once, first-seen order); a new one past `max_intents` raises `SessionLimitError`."""
        text = intent.strip()
        now = self._clock()
        with self._transaction() as conn:
            owner = self._owner(conn, session_id, user_id, now, write=True)
            existing = self._locked(conn, session_id, owner, now)
            if existing is not None:
                self.check_intent_room(session_id, existing["intents"], text)
            row = existing or self._create(conn, session_id, owner, now)
            intents = row["intents"] if text in row["intents"] else [*row["intents"], text]
            self._write(conn, {**row, "intents": intents}, now)

    def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """A copy of the session's state (empty when unknown or expired); counts as activity. With `bind` and a
        `user_id`, an unknown session is created for that user."""
        now = self._clock()
        with self._transaction() as conn:
            owner = self._owner(conn, session_id, user_id, now, write=False)
            key = {"sid": session_id, "uid": owner, "now": now, "cutoff": now - self.ttl_seconds}
            row = conn.execute(SNAPSHOT_SQL, key).fetchone()
            if row is None:
                if bind and user_id is not None:
                    conn.execute(EXPIRED_SQL, key)
                    self._create(conn, session_id, user_id, now)
                return ShortTermMemory()
            return ShortTermMemory(
                messages=[Message.model_validate(m) for m in row["messages"]],
                entities={kind: list(values) for kind, values in row["entities"].items()},
                intents=list(row["intents"]),
            )

    def messages_seen(self, session_id: str, *, user_id: UUID | None = None) -> int:
        """Messages the session has seen in total (0 when unknown or expired)."""
        now = self._clock()
        with self._transaction() as conn:
            owner = self._owner(conn, session_id, user_id, now, write=False)
            row = self._locked(conn, session_id, owner, now)
            return int(row["messages_seen"]) if row else 0

    def drop(self, session_id: str, *, user_id: UUID | None = None) -> bool:
        """Forget the session now; returns whether it existed."""
        now = self._clock()
        with self._transaction() as conn:
            owner = self._owner(conn, session_id, user_id, now, write=False)
            if self._locked(conn, session_id, owner, now) is None:
                return False
            conn.execute(DELETE_SQL, {"sid": session_id, "uid": owner})
            return True

    def __len__(self) -> int:
        """Live sessions (all users)."""
        with self._transaction() as conn:
            row = conn.execute(COUNT_SQL, (self._clock() - self.ttl_seconds,)).fetchone()
            return int(row["live"]) if row else 0

    def expire(self) -> int:
        """Delete every session idle for longer than the TTL; returns how many."""
        with self._transaction() as conn:
            return int(conn.execute(EXPIRE_SQL, (self._clock() - self.ttl_seconds,)).rowcount)


def postgres_sessions_from_settings(settings: MemorySettings, url: str) -> PostgresSessionStore:
    """The Postgres session store `settings` describe (window, TTL, per-user cap, entity and intent limits)."""
    return PostgresSessionStore.connect(url, pooler=settings.database_pooler, **session_limits(settings))
