"""The SQL of the Postgres session store (`postgres_store.py`) and the two message shapes it sends.

A call is at most two round trips (one for a read, a drop, or a message appended with its user): each round trip
is one psycopg pipeline (statements sent together, one `Sync`), so the role switch, the lock and the write travel
together and stay prepared statements:

- `one_message`: statements up to the `Sync` run as one implicit transaction: the transaction-local role covers
  them and vanishes with them, also on error.
- `open_locked` then `commit_after`: a transaction that spans two round trips, for the operations whose new
  state is computed here (entities merged case- and accent-insensitively, limits, the owner of a call without a
  user): `begin`, the role and the lock in the first; the writes and `commit` in the second.

Every statement names the session by (session id, owner): `user_id is not distinct from` matches the anonymous
owner (null) too, and the unique (session_id, user_id) index finds the rows of the id first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

__all__ = [
    "APPEND_ANY_SQL",
    "APPEND_SQL",
    "CAP_SQL",
    "COUNT_SQL",
    "DELETE_SQL",
    "EXPIRED_SQL",
    "EXPIRE_SQL",
    "INSERT_SQL",
    "LOCK_ID_SQL",
    "LOCK_KEY_SQL",
    "OWNERS_SQL",
    "SNAPSHOT_SQL",
    "WORKER_ROLE_SQL",
    "WRITE_SQL",
    "commit_after",
    "one_message",
    "open_locked",
]

Conn = psycopg.AsyncConnection[dict[str, Any]]
Result = tuple[list[dict[str, Any]], int]
"""One statement's rows and row count."""

_T = "memory_private.memory_sessions"
_KEY = "session_id = %(sid)s and user_id is not distinct from %(uid)s"

WORKER_ROLE_SQL = "select set_config('role', 'memory_worker', true)"
"""A statement on a shared pool runs as `memory_worker` (transaction-local, as the job queue's)."""

# The session's row, locked for the transaction (a call with a user).
LOCK_KEY_SQL = f"select * from {_T} where {_KEY} for update"
# Every owner's row of a session id, locked (a call without a user resolves among them, and the resolution
# holds until the transaction commits).
LOCK_ID_SQL = f"select * from {_T} where session_id = %(sid)s for update"
# The owners of a session id (a read without a user resolves among them; it never writes a user's session).
OWNERS_SQL = f"select user_id, last_active, messages_seen from {_T} where session_id = %(sid)s"
INSERT_SQL = (
    f"insert into {_T} (session_id, user_id, messages, entities, intents, messages_seen, last_active)"
    " values (%(sid)s, %(uid)s, %(messages)s::jsonb, %(entities)s::jsonb, %(intents)s::jsonb, %(seen)s, %(now)s)"
    " on conflict (session_id, user_id) do nothing"
)
"""A new session with its first state; another process may have created it first (no row: the call retries)."""
# The whole state of a locked row (a live one, or an expired one replaced by a new session).
WRITE_SQL = (
    f"update {_T} set messages = %(messages)s::jsonb, entities = %(entities)s::jsonb, intents = %(intents)s::jsonb,"
    f" messages_seen = %(seen)s, last_active = %(now)s where {_KEY}"
)
# The window after one more message: the last `max` of `messages` and `%(messages)s` (a one-message array).
_WINDOW = (
    "(select coalesce(jsonb_agg(m.e order by m.i), '[]'::jsonb)"
    " from jsonb_array_elements({live} || %(messages)s::jsonb) with ordinality m(e, i)"
    " where m.i > jsonb_array_length({live}) + 1 - %(max)s)"
)
# One message appended to the user's session in one statement (the update's own row lock serialises two
# writers); an expired session starts over, as a new one. No row: the session is new (`INSERT_SQL`).
_LIVE = "case when s.last_active > %(cutoff)s then s.{0} else {1} end"
_EMPTY_ARRAY, _EMPTY_OBJECT = "'[]'::jsonb", "'{}'::jsonb"
APPEND_SQL = (
    f"update {_T} s set messages = {_WINDOW.format(live=_LIVE.format('messages', _EMPTY_ARRAY))},"
    f" entities = {_LIVE.format('entities', _EMPTY_OBJECT)}, intents = {_LIVE.format('intents', _EMPTY_ARRAY)},"
    f" messages_seen = {_LIVE.format('messages_seen + 1', '1')}, last_active = %(now)s"
    f" where {_KEY} returning s.messages_seen"
)
# The same without a user: appended to the one live session of the id, whoever owns it (`resolve_owner`'s rule
# for a write), its owners locked first. No row: none is live (a new anonymous session), or two owners share
# the id (ambiguous); `OWNERS_SQL` after it, in the same transaction, says which.
APPEND_ANY_SQL = (
    f"with owners as (select user_id from {_T} where session_id = %(sid)s and last_active > %(cutoff)s for update)"
    f" update {_T} s set messages = {_WINDOW.format(live='s.messages')}, messages_seen = s.messages_seen + 1,"
    " last_active = %(now)s where s.session_id = %(sid)s and (select count(*) from owners) = 1"
    " and s.user_id is not distinct from (select user_id from owners limit 1) returning s.messages_seen"
)
# A read that counts as activity: the live session touched and returned by one statement.
SNAPSHOT_SQL = (
    f"update {_T} set last_active = %(now)s where {_KEY} and last_active > %(cutoff)s"
    " returning messages, entities, intents, messages_seen"
)
DELETE_SQL = f"delete from {_T} where {_KEY} returning last_active"
EXPIRED_SQL = f"delete from {_T} where session_id = %(sid)s and last_active <= %(cutoff)s"
COUNT_SQL = f"select count(*) as live from {_T} where last_active > %(cutoff)s"
EXPIRE_SQL = f"delete from {_T} where last_active <= %(cutoff)s"
# The user's sessions beyond the cap, least recently active first (made room for before creating one).
CAP_SQL = (
    f"delete from {_T} where user_id = %(uid)s and session_id in (select session_id from {_T}"
    " where user_id = %(uid)s order by last_active desc offset %(keep)s)"
)


async def _pipelined(conn: Conn, statements: Sequence[str], params: Mapping[str, Any]) -> list[Result]:
    """`statements` in one pipeline (one round trip: the `Sync` is sent as the block exits); each statement's rows
    and row count. A failing statement skips the rest up to the `Sync`, and raises."""
    async with conn.pipeline():
        cursors = [await conn.execute(statement, params if "%(" in statement else None) for statement in statements]
    return [((await c.fetchall() if c.description else []), c.rowcount) for c in cursors]


async def one_message(
    conn: Conn, statements: Sequence[str], params: Mapping[str, Any], *, worker_role: bool
) -> list[Result]:
    """`statements` in one round trip and one implicit transaction (as `memory_worker` with `worker_role`);
    each statement's rows and row count."""
    prelude = [WORKER_ROLE_SQL] if worker_role else []
    return (await _pipelined(conn, [*prelude, *statements], params))[len(prelude) :]


async def open_locked(conn: Conn, lock: str, params: Mapping[str, Any], *, worker_role: bool) -> list[dict[str, Any]]:
    """Begin a transaction (as `memory_worker` with `worker_role`) and run `lock` in it, in one round trip; its
    rows. The transaction stays open: `commit_after` ends it (or a `rollback`)."""
    prelude = ["begin", WORKER_ROLE_SQL] if worker_role else ["begin"]
    return (await _pipelined(conn, [*prelude, lock], params))[-1][0]


async def commit_after(conn: Conn, statements: Sequence[str], params: Mapping[str, Any]) -> list[Result]:
    """`statements` then `commit`, in one round trip, in the transaction `open_locked` began; each statement's
    rows and row count. A failing statement skips the rest (the commit too): the caller rolls back."""
    return (await _pipelined(conn, [*statements, "commit"], params))[:-1]
