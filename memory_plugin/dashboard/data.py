"""What the dashboard reads and writes beyond the stores' own calls, every statement as the signed-in user.

Each function runs under the user's identity (role `authenticated` with their claims), so row-level security
decides what exists: another user's row is never read, corrected or deleted, whatever id a request names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from ..context.receipt_store import StoredReceipt, read_receipts
from ..crypto import KeyRing
from ..database.admin import USER_TABLES_SQL
from ..database.calls import postgres_errors, run_as_user

__all__ = ["OwnFact", "SummaryVersion", "UserData"]


@dataclass(frozen=True, slots=True)
class OwnFact:
    """A current fact of the signed-in user, as a correction needs it."""

    id: UUID
    category: str
    content: str
    importance: int


@dataclass(frozen=True, slots=True)
class SummaryVersion:
    """One version of a rolling summary ('user' or 'session:<id>')."""

    scope: str
    version: int
    content: str
    kind: str
    message_count: int
    created_at: datetime


# Tables the signed-in user may delete from (RLS then limits the delete to their rows); the others (counters,
# search documents) follow through triggers and foreign keys.
_DELETABLE_SQL = f"""
select t.nspname, t.relname from ({USER_TABLES_SQL}) t(nspname, relname)
 where has_table_privilege('authenticated', format('%I.%I', t.nspname, t.relname), 'DELETE')
"""


class UserData:
    """User-scoped statements on the API's pool."""

    def __init__(self, pool: AsyncConnectionPool[Any], *, ring: KeyRing | None = None) -> None:
        self._pool = pool
        self._ring = ring
        """The encryption keys sealed fact texts of receipts are opened with (None: shown as "")."""

    async def _as_user(self, user: UUID, statements: list[str], params: dict[str, Any]) -> list[tuple[list[Any], int]]:
        with postgres_errors("the dashboard's request"):
            async with self._pool.connection() as conn:
                return await run_as_user(conn, user, statements, {**params, "user": user})

    async def own_fact(self, user: UUID, fact_id: UUID) -> OwnFact | None:
        """The user's current fact `fact_id`, or None (no such fact, not current, or not theirs)."""
        [(rows, _)] = await self._as_user(
            user,
            [
                "select id, category, content, importance from public.user_memory"
                " where id = %(id)s and user_id = %(user)s and kind = 'fact' and invalid_at is null"
            ],
            {"id": fact_id},
        )
        return OwnFact(*_values(rows[0], 4)) if rows else None

    async def slots(self, user: UUID) -> dict[str, Any]:
        """The user's structured slots (field -> entries), {} when none."""
        [(rows, _)] = await self._as_user(user, ["select slots from public.memory_slots where user_id = %(user)s"], {})
        value = _values(rows[0], 1)[0] if rows else {}
        return dict(value) if isinstance(value, dict) else {}

    async def summaries(self, user: UUID) -> list[SummaryVersion]:
        """The user's rolling summaries, each scope newest version first."""
        [(rows, _)] = await self._as_user(
            user,
            [
                "select scope, version, content, kind, message_count, created_at from public.memory_summaries"
                " where user_id = %(user)s order by scope, version desc"
            ],
            {},
        )
        return [SummaryVersion(*_values(r, 6)) for r in rows]

    async def receipts(self, user: UUID, *, limit: int = 20, receipt_id: int | None = None) -> list[StoredReceipt]:
        """What the agent was given on the user's recent turns, newest first (`receipt_id`: that turn only)."""
        return await read_receipts(self._pool, user, limit=limit, receipt_id=receipt_id, ring=self._ring)

    async def erase(self, user: UUID) -> int:
        """Delete every row of the user that RLS lets them delete, in one transaction; returns the rows deleted.

        Left, holding no content: the per-table row counters (zero afterwards), the write-rate bucket and the
        operator's per-user limits, which a user may read but not change (so erasing cannot reset a limit);
        `memory-plugin erase` (the service path) removes them."""
        with postgres_errors("listing the user's tables"):
            async with self._pool.connection() as conn:
                tables = [_values(r, 2) for r in await (await conn.execute(_DELETABLE_SQL)).fetchall()]
                deletes = [
                    sql.SQL("delete from {} where user_id = %(user)s").format(sql.Identifier(s, t)).as_string(conn)
                    for s, t in tables
                ]
        return sum(count for _, count in await self._as_user(user, deletes, {}))


def _values(row: Any, n: int) -> list[Any]:
    """A row's first `n` values, whatever the pool's row factory (dicts or tuples)."""
    return list(row.values())[:n] if isinstance(row, dict) else list(row)[:n]
