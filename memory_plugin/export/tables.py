"""What the export reads from the catalog about a table: its columns (generated and identity ones marked) and
its primary key. Read at run time, so a column added by a migration is exported without a code change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import tuple_row

__all__ = ["TableInfo", "table_info"]

COLUMNS_SQL = """
select a.attname, a.attgenerated <> '', a.attidentity <> '',
       coalesce(array_position(i.indkey::int2[], a.attnum), 0)
  from pg_attribute a
  left join pg_index i on i.indrelid = a.attrelid and i.indisprimary
 where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped
 order by a.attnum
"""


@dataclass(frozen=True, slots=True)
class TableInfo:
    """One table's columns as the export uses them."""

    name: str
    """`schema.table`."""
    columns: tuple[str, ...]
    """Stored columns (generated ones left out), in table order; `user_id` among them."""
    identity: tuple[str, ...]
    """Columns filled from a sequence (`generated always as identity`)."""
    key: tuple[str, ...]
    """The primary key without `user_id`: the row order and keyset of its pages."""

    @property
    def schema_name(self) -> str:
        return self.name.partition(".")[0]

    @property
    def table_name(self) -> str:
        return self.name.partition(".")[2]


async def table_info(conn: psycopg.AsyncConnection[Any], name: str) -> TableInfo:
    """The catalog's description of `name` (`schema.table`)."""
    cursor = conn.cursor(row_factory=tuple_row)
    await cursor.execute(COLUMNS_SQL, (name,))
    rows = await cursor.fetchall()
    key = sorted((int(r[3]), str(r[0])) for r in rows if int(r[3]) > 0 and r[0] != "user_id")
    return TableInfo(
        name=name,
        columns=tuple(str(r[0]) for r in rows if not r[1]),
        identity=tuple(str(r[0]) for r in rows if r[2]),
        key=tuple(column for _, column in key),
    )
