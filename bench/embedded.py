"""A throwaway embedded PostgreSQL for a benchmark: started in a temporary directory, migrated, removed after."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.migrations import migrate

__all__ = ["migrated_database"]


async def _migrate(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)


@contextmanager
def migrated_database(prefix: str) -> Iterator[str]:
    """The URL of a new embedded server with the project's migrations applied; stopped and deleted on exit."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        embedded = EmbeddedPostgres(Path(tmp))
        url = embedded.start()
        try:
            asyncio.run(_migrate(url))
            yield url
        finally:
            embedded.stop()
