"""A throwaway embedded PostgreSQL for a benchmark: started in a temporary directory, migrated, removed after;
and the settings a bench's manager opens on such a database."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import psycopg
from pydantic import SecretStr

from memory_plugin import MemorySettings
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.migrations import migrate

__all__ = ["database_settings", "migrated", "migrated_database"]


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


@asynccontextmanager
async def migrated(database_url: str | None, prefix: str = "memory-plugin-bench-") -> AsyncIterator[str]:
    """`database_url` migrated, or (None) a new embedded server's, migrated, stopped and deleted on exit: the
    async form of `migrated_database` for a bench that may be handed a database."""
    if database_url is not None:
        await _migrate(database_url)
        yield database_url
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        embedded = EmbeddedPostgres(Path(tmp), database="memory_bench")
        url = await asyncio.to_thread(embedded.start)
        try:
            await _migrate(url)
            yield url
        finally:
            await asyncio.to_thread(embedded.stop)


def database_settings(database_url: str) -> MemorySettings:
    """A manager's settings on a database `migrated` already: no migration at open, a pool of 1 to 2 connections,
    embeddings off (the bench measures the database path)."""
    return MemorySettings(
        database_url=SecretStr(database_url),
        auto_migrate=False,
        pool_min_size=1,
        pool_max_size=2,
        embedding_model="none",
    )
