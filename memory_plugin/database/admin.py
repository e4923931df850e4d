"""`MemoryAdmin`: the explicit service path, for work done on behalf of no single user.

User-scoped operations go through a store, which runs every statement as `authenticated` with the
user's JWT claims, so row-level security keeps users apart. A few operations are not on behalf of one
user and must see every row: applying migrations, erasing a user's memory on request (GDPR), retention
jobs. They live here, on a separate connection whose role is explicit: on Supabase the `postgres` role
(the dashboard's connection string), on the embedded default its superuser. The application's own
login role (`supabase/roles/memory_plugin_app.sql`) cannot do any of this, by design.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from ..logs import LOG_PREFIX, logger
from ..quality.decay import DecayPolicy
from .classify import store_error
from .migrations import migrate
from .pooler import PoolerMode, connection_kwargs
from .reach import connect_failure

__all__ = ["ArchiveReport", "MemoryAdmin"]

# Every table that holds per-user rows (a partitioned table as one), in the order they are erased.
USER_TABLES_SQL = """
select n.nspname, c.relname
  from pg_class c
  join pg_namespace n on n.oid = c.relnamespace
  join pg_attribute a on a.attrelid = c.oid and a.attname = 'user_id' and not a.attisdropped
 where n.nspname in ('public', 'memory_private') and c.relkind in ('r', 'p') and not c.relispartition
 order by c.relname
"""


# Maintenance: archive current facts (every user's) whose decayed confidence fell below the floor, or that expired.
# The decay expression is memory_rank_facts' (supabase/schemas/21_memory_context.sql). Rejections
# never decay. Archived rows keep everything and leave the ranking index; restating one brings it back.
ARCHIVE_DECAYED_SQL = """
with due as (
    select m.id, (m.expires_at is not null and m.expires_at <= %(now)s) as expired
      from public.user_memory m
     where m.kind = 'fact' and m.invalid_at is null and m.archived_at is null
       and ((m.expires_at is not null and m.expires_at <= %(now)s)
            or (m.category <> 'rejection'
                and m.confidence * coalesce(exp(greatest(-700,
                        -greatest(0, date_part('epoch', %(now)s::timestamptz)
                                     - date_part('epoch', m.last_reinforced_at))
                        * ln(2) / nullif(greatest((%(half_lives)s::jsonb ->> m.category)::float8, 0), 0) / 86400)), 1)
                    < %(floor)s))
     for update skip locked
),
archived as (
    update public.user_memory m set archived_at = %(now)s from due where m.id = due.id returning due.expired
)
select count(*) filter (where not expired), count(*) filter (where expired) from archived
"""


@dataclass(frozen=True, slots=True)
class ArchiveReport:
    """What one maintenance run archived."""

    decayed: int
    """Facts whose decayed confidence was below the floor."""
    expired: int
    """Facts past their `expires_at`."""


class MemoryAdmin:
    """Administrative operations on the memory database, over one connection of an administrative role.

    Use as `async with await MemoryAdmin.connect(admin_url) as admin: await admin.erase_user(user_id)`.
    """

    def __init__(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        self._conn = conn

    @classmethod
    async def connect(cls, url: str, *, connect_timeout: float = 5.0, pooler: PoolerMode = "auto") -> MemoryAdmin:
        """Connect with an administrative role (autocommit: each operation manages its own transaction;
        `pooler`: see `database.pooler`; migrations need a direct or session-mode URL)."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                url,
                autocommit=True,
                row_factory=tuple_row,
                connect_timeout=max(1, round(connect_timeout)),
                **connection_kwargs(url, pooler),
            )
        except psycopg.OperationalError as exc:
            raise connect_failure(exc, "as administrator ") from exc
        return cls(conn)

    async def migrate(self) -> list[str]:
        """Apply pending migrations; returns the versions applied."""
        return await migrate(self._conn)

    async def erase_user(self, user_id: UUID) -> int:
        """Delete everything stored about `user_id`, in every table, in one transaction; returns rows deleted."""
        deleted = 0
        try:
            async with self._conn.transaction():
                tables = await (await self._conn.execute(USER_TABLES_SQL)).fetchall()
                # Deleting from one table can write another's rows (triggers keep per-user counters): a second
                # pass removes what the first left behind, so no row of the user remains. Counted: the first.
                for sweep in (1, 2):
                    for schema, name in tables:
                        cursor = await self._conn.execute(
                            sql.SQL("delete from {} where user_id = %s").format(sql.Identifier(schema, name)),
                            (user_id,),
                        )
                        deleted += cursor.rowcount if sweep == 1 else 0
        except psycopg.Error as exc:
            raise store_error(exc, f"erasing user {user_id}") from exc
        names = ", ".join(f"{schema}.{name}" for schema, name in tables)
        logger.info("%s erased %d rows of user %s (%s)", LOG_PREFIX, deleted, user_id, names)
        return deleted

    async def archive_decayed(self, policy: DecayPolicy, *, now: datetime | None = None) -> ArchiveReport:
        """Archive every user's current facts whose decayed confidence is below `policy.floor`, and expired
        ones, in one statement. Optional housekeeping: reads already hide them (`memory_rank_facts` applies the
        floor and the expiry itself); archiving takes them out of the ranking index so it stays small."""
        params = {"now": now, "half_lives": json.dumps(policy.as_json()), "floor": policy.floor}
        try:
            async with self._conn.transaction():
                if now is None:
                    row = await (await self._conn.execute("select now()")).fetchone()
                    assert row is not None
                    params["now"] = row[0]
                cursor = await self._conn.execute(ARCHIVE_DECAYED_SQL, params)
                counts = await cursor.fetchone()
        except psycopg.Error as exc:
            raise store_error(exc, "archiving decayed facts") from exc
        report = ArchiveReport(decayed=int(counts[0]) if counts else 0, expired=int(counts[1]) if counts else 0)
        logger.info(
            "%s maintenance archived %d decayed and %d expired facts", LOG_PREFIX, report.decayed, report.expired
        )
        return report

    async def close(self) -> None:
        """Close the connection."""
        await self._conn.close()

    async def __aenter__(self) -> MemoryAdmin:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
