"""Export and import over a database URL: the connection each opens for its own work."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..database.calls import postgres_errors
from ..database.pooler import connection_kwargs
from ..database.reach import connect
from .format import parse_document
from .reader import export_chunks
from .writer import ImportReport, import_document

__all__ = ["PoolExporter", "export_from_url", "import_into_url"]


async def _connect(url: str, seconds: float) -> psycopg.AsyncConnection[Any]:
    # connection_kwargs: prepared statements off behind a transaction pooler (port 6543, database.pooler).
    options = {"connect_timeout": max(1, round(seconds)), **connection_kwargs(url)}
    return await connect(url, what="for the export ", autocommit=True, **options)


async def export_from_url(
    url: str, user_id: UUID, *, as_user: bool, connect_timeout: float = 5.0
) -> AsyncIterator[str]:
    """`export_chunks` on a connection of its own, closed when the export ends or is abandoned."""
    conn = await _connect(url, connect_timeout)
    try:
        async for chunk in export_chunks(conn, user_id, as_user=as_user):
            yield chunk
    finally:
        await conn.close()


async def import_into_url(
    url: str, raw: str | bytes | Mapping[str, Any], *, connect_timeout: float = 5.0
) -> ImportReport:
    """Check `raw` (before connecting), then restore it through an administrative connection."""
    document = parse_document(raw)
    conn = await _connect(url, connect_timeout)
    try:
        return await import_document(conn, document)
    finally:
        await conn.close()


class PoolExporter:
    """Exports over a connection pool the application already has (the REST API's), each user under RLS."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def chunks(self, user_id: UUID) -> AsyncIterator[str]:
        """`export_chunks` as `user_id`, holding one pooled connection until the export ends or is abandoned."""
        with postgres_errors(f"exporting user {user_id}"):
            async with self._pool.connection() as conn:
                async for chunk in export_chunks(conn, user_id, as_user=True):
                    yield chunk
