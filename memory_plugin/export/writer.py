"""Import: restore a user's export into a database that holds nothing of that user, in one transaction.

The rule: an import never merges. If any table holds a row of the user, it is refused
(`ImportConflictError`) and nothing is written; erase the user first to replace their memory. Rows keep their
ids and timestamps, so export → erase → import → export gives the same document. It runs on an administrative
connection (the service path): ids, timestamps and identity values are written as they were, which the
application's role under row-level security is not meant to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import tuple_row

from ..database.calls import postgres_errors
from ..errors import ExportFormatError, ImportConflictError
from .format import SECTIONS, ExportDocument
from .tables import TableInfo, table_info

__all__ = ["ImportReport", "import_document"]

LOCK_SQL = "select pg_advisory_xact_lock(hashtextextended('memory_plugin.import:' || %s::text, 0))"
# The facts' search index is built once after they are restored, in set-based statements, instead of by the
# per-fact triggers (O(n²) in one transaction: 1,449 s for 50,000 facts; supabase/schemas/45_memory_bulk_load.sql).
BULK_LOAD_SQL = "select set_config('memory_plugin.bulk_load', 'on', true)"
INDEX_FACTS_SQL = "select memory_private.memory_search_index_facts(%s)"


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import restored."""

    user_id: UUID
    rows: dict[str, int] = field(default_factory=dict)
    """Rows restored per section."""

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _insert(info: TableInfo) -> sql.Composed:
    """Insert the rows of a JSON array in array order, as one statement: foreign keys between rows of the same
    table (a fact's `superseded_by`, an entry's `parent_id`) are checked once the statement ends."""
    values = [
        sql.SQL("%(user_id)s::uuid") if c == "user_id" else sql.SQL("r.{}").format(sql.Identifier(c))
        for c in info.columns
    ]
    return sql.SQL(
        "insert into {table} ({columns}){overriding} select {values}"
        " from jsonb_array_elements(%(rows)s::jsonb) with ordinality as e(value, n)"
        " cross join lateral jsonb_populate_record(null::{table}, e.value) as r order by e.n"
    ).format(
        table=sql.Identifier(info.schema_name, info.table_name),
        columns=sql.SQL(", ").join(sql.Identifier(c) for c in info.columns),
        overriding=sql.SQL(" overriding system value") if info.identity else sql.SQL(""),
        values=sql.SQL(", ").join(values),
    )


def _advance_sequence(info: TableInfo, column: str) -> sql.Composed:
    """Move the column's sequence past the restored values, so new rows never reuse one."""
    return sql.SQL(
        "select setval(s.seq, m.top) from (select pg_get_serial_sequence(%(table)s, %(column)s)::regclass as seq) s,"
        " (select max({column}) as top from {table}) m"
        " where m.top > coalesce(pg_sequence_last_value(s.seq), 0)"
    ).format(column=sql.Identifier(column), table=sql.Identifier(info.schema_name, info.table_name))


def _check_columns(name: str, info: TableInfo, rows: list[dict[str, Any]]) -> None:
    allowed = set(info.columns) - {"user_id"}
    for index, row in enumerate(rows):
        unknown = set(row) - allowed
        if unknown:
            raise ExportFormatError(
                f"{name}[{index}] has fields {sorted(unknown)} that {info.name} does not have: the file was not"
                " written by this version of the export, or was edited"
            )


async def _holds_user(conn: psycopg.AsyncConnection[Any], user_id: UUID) -> list[str]:
    """The exported tables holding a row of the user (derived ones, which triggers keep, do not count)."""
    cursor = conn.cursor(row_factory=tuple_row)
    held = []
    for schema, _, table in (name.partition(".") for name in SECTIONS.values()):
        query = sql.SQL("select exists (select from {} where user_id = %s)").format(sql.Identifier(schema, table))
        await cursor.execute(query, (user_id,))
        row = await cursor.fetchone()
        if row is not None and row[0]:
            held.append(f"{schema}.{table}")
    return held


async def import_document(conn: psycopg.AsyncConnection[Any], document: ExportDocument) -> ImportReport:
    """Restore `document` through `conn` (an administrative connection not in a transaction): everything or
    nothing. Raises `ImportConflictError` when the database holds rows of the user (or a row id the document
    uses), `ExportFormatError` when a row does not fit its table."""
    user_id = document.user_id
    counts: dict[str, int] = {}
    with postgres_errors(f"importing user {user_id}"):
        try:
            async with conn.transaction():
                await conn.execute(LOCK_SQL, (str(user_id),))  # two imports of one user: the second sees the first
                held = await _holds_user(conn, user_id)
                if held:
                    raise ImportConflictError(
                        f"the database already holds memory of user {user_id} (in {', '.join(held)}): an import"
                        " never merges; erase the user first (`memory-plugin erase`) to replace it"
                    )
                await conn.execute(BULK_LOAD_SQL)
                for name, table in SECTIONS.items():
                    rows = document.sections[name]
                    counts[name] = len(rows)
                    if rows:
                        await _restore(conn, name, table, user_id, rows)
                await conn.execute(INDEX_FACTS_SQL, (user_id,))
        except pg_errors.UniqueViolation as exc:
            raise ImportConflictError(
                f"a row of the export already exists in this database, under another user: {exc}"
            ) from exc
        except (pg_errors.DataError, pg_errors.IntegrityError) as exc:
            raise ExportFormatError(f"a row of the export does not fit its table: {exc}") from exc
    return ImportReport(user_id=user_id, rows=counts)


async def _restore(
    conn: psycopg.AsyncConnection[Any], name: str, table: str, user_id: UUID, rows: list[dict[str, Any]]
) -> None:
    info = await table_info(conn, table)
    _check_columns(name, info, rows)
    await conn.execute(_insert(info), {"user_id": str(user_id), "rows": json.dumps(rows)})
    for column in info.identity:
        await conn.execute(_advance_sequence(info, column), {"table": table, "column": column})
