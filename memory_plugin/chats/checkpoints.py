"""Workflow checkpoints: a compact snapshot of a workflow's state per session, bounded and pruned on save.

`save` stores the state and, in the same statement, deletes the session's snapshots beyond the newest
`max_checkpoints`; `latest` / `load` read them back (in another worker after a restart). Postgres runs every
statement as the user under RLS, like the chats.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import count
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..database.calls import postgres_errors, run_as_user
from ..errors import InvalidMemoryInputError

__all__ = ["Checkpoint", "CheckpointStore", "InMemoryCheckpointStore", "PostgresCheckpointStore"]

MAX_STATE_BYTES = 65_536
"""Largest snapshot accepted (the table's check): a snapshot, not a transcript."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One saved snapshot."""

    id: int
    session_id: str
    step: str
    state: dict[str, Any]
    created_at: datetime


def _encode(session_id: str, step: str, state: Mapping[str, Any], max_checkpoints: int) -> str:
    if not 1 <= len(session_id) <= 200 or not 1 <= len(step) <= 200:
        raise InvalidMemoryInputError("session_id and step must have 1 to 200 characters")
    if max_checkpoints < 1:
        raise InvalidMemoryInputError("max_checkpoints must be at least 1 (MEMORY_MAX_CHECKPOINTS)")
    try:
        text = json.dumps(dict(state), ensure_ascii=False, default=str)
    except (TypeError, ValueError) as exc:
        raise InvalidMemoryInputError(f"a checkpoint's state must be JSON: {exc}") from exc
    if len(text.encode()) > MAX_STATE_BYTES:
        raise InvalidMemoryInputError(
            f"a checkpoint's state is limited to {MAX_STATE_BYTES} bytes: keep the question, output, route and"
            " entities, not the transcript"
        )
    return text


class CheckpointStore(Protocol):
    """Checkpoints of each user's sessions."""

    async def save(
        self, user_id: UUID, session_id: str, step: str, state: Mapping[str, Any], *, max_checkpoints: int
    ) -> Checkpoint:
        """Store a snapshot and prune the session's older ones beyond `max_checkpoints`."""
        ...

    async def list_checkpoints(self, user_id: UUID, session_id: str) -> list[Checkpoint]:
        """The session's snapshots, newest first."""
        ...

    async def latest(self, user_id: UUID, session_id: str, step: str | None = None) -> Checkpoint | None:
        """The newest snapshot of the session (of `step`, if given)."""
        ...

    async def delete_session(self, user_id: UUID, session_id: str) -> int:
        """Delete the session's snapshots; returns how many."""
        ...


class InMemoryCheckpointStore:
    """Checkpoints in RAM (tests, one process)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[UUID, str], list[Checkpoint]] = {}
        self._ids = count(1)
        self._lock = asyncio.Lock()

    async def save(
        self, user_id: UUID, session_id: str, step: str, state: Mapping[str, Any], *, max_checkpoints: int
    ) -> Checkpoint:
        """Store a snapshot and prune beyond `max_checkpoints`."""
        text = _encode(session_id, step, state, max_checkpoints)
        async with self._lock:
            row = Checkpoint(next(self._ids), session_id, step, json.loads(text), datetime.now(UTC))
            rows = [row, *self._rows.get((user_id, session_id), [])]
            self._rows[(user_id, session_id)] = rows[:max_checkpoints]
            return row

    async def list_checkpoints(self, user_id: UUID, session_id: str) -> list[Checkpoint]:
        """Newest first."""
        return list(self._rows.get((user_id, session_id), []))

    async def latest(self, user_id: UUID, session_id: str, step: str | None = None) -> Checkpoint | None:
        """The newest snapshot (of `step`)."""
        return next((c for c in self._rows.get((user_id, session_id), []) if step is None or c.step == step), None)

    async def delete_session(self, user_id: UUID, session_id: str) -> int:
        """Delete the session's snapshots."""
        async with self._lock:
            return len(self._rows.pop((user_id, session_id), []))


_COLUMNS = "id, session_id, step, state, created_at"
# Saves of one session are serialised by a transaction-level advisory lock taken in a statement of its own, so
# the insert-and-prune statement after it (a new snapshot under READ COMMITTED) sees every committed save.
# Insert and prune in one statement: the delete sees the table as it was before the insert, so it keeps the
# newest `max - 1` older snapshots, and with the new one the session holds exactly at most `max`.
LOCK_SQL = "select pg_advisory_xact_lock(hashtextextended(%(lock)s, 7441))"
SAVE_SQL = f"""
with new as (
    insert into memory_private.workflow_checkpoints (user_id, session_id, step, state)
    values (%(user)s, %(session)s, %(step)s, %(state)s::jsonb) returning {_COLUMNS}
), pruned as (
    delete from memory_private.workflow_checkpoints c
     where c.user_id = %(user)s and c.session_id = %(session)s
       and c.id in (select o.id from memory_private.workflow_checkpoints o
                     where o.user_id = %(user)s and o.session_id = %(session)s
                     order by o.id desc offset %(keep)s)
)
select {_COLUMNS} from new
"""
LIST_SQL = (
    f"select {_COLUMNS} from memory_private.workflow_checkpoints where user_id = %(user)s and session_id = %(session)s"
    " order by id desc"
)
LATEST_SQL = (
    f"select {_COLUMNS} from memory_private.workflow_checkpoints where user_id = %(user)s and session_id = %(session)s"
    " and (%(step)s::text is null or step = %(step)s) order by id desc limit 1"
)
DELETE_SQL = "delete from memory_private.workflow_checkpoints where user_id = %(user)s and session_id = %(session)s"


def _row(r: dict[str, Any]) -> Checkpoint:
    return Checkpoint(r["id"], r["session_id"], r["step"], r["state"], r["created_at"])


class PostgresCheckpointStore:
    """Checkpoints in `memory_private.workflow_checkpoints`, each statement as the user under RLS."""

    def __init__(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]) -> None:
        self._pool = pool

    async def _run(self, user_id: UUID, query: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        with postgres_errors("the checkpoint operation"):
            async with self._pool.connection() as conn:
                return (await run_as_user(conn, user_id, [query], params))[-1]  # the last statement's answer

    async def save(
        self, user_id: UUID, session_id: str, step: str, state: Mapping[str, Any], *, max_checkpoints: int
    ) -> Checkpoint:
        """Store a snapshot and prune beyond `max_checkpoints`, in one statement."""
        text = _encode(session_id, step, state, max_checkpoints)
        params = {
            "user": user_id, "session": session_id, "step": step, "state": text, "keep": max_checkpoints - 1,
            "lock": f"workflow_checkpoints:{user_id}:{session_id}",
        }  # fmt: skip
        rows, _ = await self._run(user_id, f"{LOCK_SQL}; {SAVE_SQL}", params)
        return _row(rows[0])

    async def list_checkpoints(self, user_id: UUID, session_id: str) -> list[Checkpoint]:
        """Newest first."""
        rows, _ = await self._run(user_id, LIST_SQL, {"user": user_id, "session": session_id})
        return [_row(r) for r in rows]

    async def latest(self, user_id: UUID, session_id: str, step: str | None = None) -> Checkpoint | None:
        """The newest snapshot (of `step`)."""
        rows, _ = await self._run(user_id, LATEST_SQL, {"user": user_id, "session": session_id, "step": step})
        return _row(rows[0]) if rows else None

    async def delete_session(self, user_id: UUID, session_id: str) -> int:
        """Delete the session's snapshots."""
        _, deleted = await self._run(user_id, DELETE_SQL, {"user": user_id, "session": session_id})
        return deleted
