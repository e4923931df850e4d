"""Export: every row held about a user, streamed as the chunks of one JSON document (`format.py`).

Each section is read in keyset pages inside one read-only repeatable-read transaction, so the document is one
consistent snapshot while memory stays bounded by a page: 1,000 rows, 100 of the sections whose rows hold a
message or a workflow state, 20 of those holding whole conversations (a chat with both histories of 20 turns
of 1,000 characters is ~40 kB of JSON: a page of 20 is ~1 MB, held about three times while it is decoded and
joined).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from ..database.calls import IDENTITY_PRELUDE_SQL, postgres_errors, user_claims
from .format import EXPORT_FORMAT, EXPORT_VERSION, ORDER_BY, SECTIONS
from .tables import TableInfo, table_info

__all__ = ["PAGE_ROWS", "export_chunks"]

PAGE_ROWS = 1000
LARGE_ROW_SECTIONS = {
    "chats": 20, "conversation_entries": 100, "sessions": 20, "checkpoints": 100, "jobs": 100, "receipts": 100,
}  # fmt: skip


def _page_query(info: TableInfo, order: tuple[str, ...], first: bool) -> sql.Composed:
    """One page of the user's rows as JSON text (without `user_id`), with the keyset values of each row."""
    keyset: sql.Composable = sql.SQL("")
    if not first and order:
        keyset = sql.SQL(" and ({}) > ({})").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in order),
            sql.SQL(", ").join(sql.Placeholder() for _ in order),
        )
    return sql.SQL(
        "select to_jsonb(r)::text{keys} from (select {columns} from {table} where user_id = %s{keyset}"
        " order by {order} limit %s) as r"
    ).format(
        keys=sql.SQL("").join(sql.SQL(", r.{}").format(sql.Identifier(c)) for c in order),
        columns=sql.SQL(", ").join(sql.Identifier(c) for c in info.columns if c != "user_id"),
        table=sql.Identifier(info.schema_name, info.table_name),
        keyset=keyset,
        order=sql.SQL(", ").join(sql.Identifier(c) for c in order) if order else sql.SQL("1"),
    )


async def _section_rows(
    conn: psycopg.AsyncConnection[Any], name: str, user_id: UUID, page_rows: int
) -> AsyncIterator[list[str]]:
    info = await table_info(conn, SECTIONS[name])
    order = ORDER_BY.get(name, info.key)
    cursor = conn.cursor(row_factory=tuple_row)
    last: tuple[Any, ...] | None = None
    while True:
        query = _page_query(info, order, first=last is None)
        await cursor.execute(query, (user_id, *(last or ()), page_rows))
        rows = await cursor.fetchall()
        if rows:
            yield [str(row[0]) for row in rows]
        if len(rows) < page_rows or not order:
            return
        last = tuple(rows[-1][1:])


async def export_chunks(
    conn: psycopg.AsyncConnection[Any], user_id: UUID, *, as_user: bool, page_rows: int = PAGE_ROWS
) -> AsyncIterator[str]:
    """The export of `user_id`, as text chunks to write one after the other (a page of rows each).

    `as_user`: read as the user under row-level security (the application's connection, the REST API); False
    for an administrative connection, which reads the same rows. `conn` must not be in a transaction."""
    with postgres_errors(f"exporting user {user_id}"):
        async with conn.transaction():
            await conn.execute("set transaction isolation level repeatable read, read only")
            if as_user:
                await conn.execute(IDENTITY_PRELUDE_SQL, (user_claims(user_id),))
            await conn.execute("set local timezone = 'UTC'")  # timestamps read the same wherever it runs
            head = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "user_id": str(user_id)}
            yield json.dumps(head)[:-1] + ', "sections": {'
            for index, name in enumerate(SECTIONS):
                yield ("," if index else "") + f"\n{json.dumps(name)}: ["
                first = True
                rows_per_page = min(page_rows, LARGE_ROW_SECTIONS.get(name, page_rows))
                async for page in _section_rows(conn, name, user_id, rows_per_page):
                    yield ("\n" if first else ",\n") + ",\n".join(page)
                    first = False
                yield "]"
            yield "\n}}\n"
