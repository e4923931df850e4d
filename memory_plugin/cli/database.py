"""The commands that manage the database: `db-url`, `stop` (the embedded server), and, as the administrative
role, `migrate`, `erase` (right to erasure) and `maintain` (archive decayed facts)."""

from __future__ import annotations

import subprocess
from typing import Annotated
from uuid import UUID

import psycopg
import typer

from ..database import EmbeddedPostgres
from ..database.admin import ArchiveReport, MemoryAdmin
from ..database.embedded import stop_embedded
from ..database.migrations import migrate
from ..database.reach import connect
from ..errors import MemoryPluginError
from ..outage.journal import WriteJournal
from ..quality.decay import DecayPolicy
from ..retention.policy import RetentionReport
from ..runtime.connector import DatabaseConnector
from ..settings import MemorySettings
from .common import DataDirOption, UserOption, app, fail, load_settings, out, parse_user, run

__all__ = ["admin_url", "db_url", "erase", "maintain", "migrate_command", "stop"]


async def _migrate(url: str) -> None:
    async with await connect(url, what="as administrator ", autocommit=True) as conn:
        await migrate(conn)


def _start_embedded(settings: MemorySettings) -> str:
    url = EmbeddedPostgres.from_settings(settings, keep_running=True).start()
    if settings.auto_migrate:
        run(_migrate(url))
    return url


@app.command("db-url")
def db_url(data_dir: DataDirOption = None) -> None:
    """Print the database URL, starting the embedded database if needed: it then stays up until
    `memory-plugin stop`, whatever other commands start and end meanwhile.

    psql "$(memory-plugin db-url)"
    """
    settings = load_settings(data_dir)
    if settings.database_url is not None:
        typer.echo(settings.database_url.get_secret_value())
        return
    try:
        url = _start_embedded(settings)
    except (psycopg.Error, OSError, subprocess.SubprocessError) as exc:
        raise fail(f"the embedded database could not be started: {exc}") from None
    typer.echo(url)


@app.command("stop")
def stop(data_dir: DataDirOption = None) -> None:
    """Stop the embedded database of the data directory (started by `db-url`, or left by a crash). Processes
    still using it lose their connections; a running manager (`chat`, an application) restarts it, as it
    owns the server while it runs."""
    settings = load_settings(data_dir)
    try:
        was_running = stop_embedded(settings.data_dir)
    except (OSError, subprocess.SubprocessError) as exc:
        raise fail(f"the embedded database could not be stopped: {exc}") from None
    where = settings.data_dir / "postgres"
    out().print(f"stopped the embedded database in {where}" if was_running else f"no server running in {where}")


def admin_url(settings: MemorySettings) -> str:
    """The administrative connection: MEMORY_ADMIN_DATABASE_URL, else MEMORY_DATABASE_URL, else embedded."""
    for url in (settings.admin_database_url, settings.database_url):
        if url is not None:
            return url.get_secret_value()
    try:
        return EmbeddedPostgres.from_settings(settings).start()  # stops at exit if this process started it
    except (psycopg.Error, OSError, subprocess.SubprocessError) as exc:
        raise fail(f"the embedded database could not be started: {exc}") from None


async def _admin_migrate(url: str) -> list[str]:
    async with await MemoryAdmin.connect(url) as admin:
        return await admin.migrate()


@app.command("migrate")
def migrate_command(data_dir: DataDirOption = None) -> None:
    """Apply pending migrations as the administrative role (MEMORY_ADMIN_DATABASE_URL)."""
    applied = run(_admin_migrate(admin_url(load_settings(data_dir))))
    out().print(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else " (up to date)"))


async def _erase(url: str, user: UUID) -> int:
    async with await MemoryAdmin.connect(url) as admin:
        return await admin.erase_user(user)


@app.command("erase")
def erase(
    user: UserOption,
    yes: Annotated[bool, typer.Option("--yes", help="Do it without asking.")] = False,
    data_dir: DataDirOption = None,
) -> None:
    """Delete everything stored about a user (right to erasure), as the administrative role."""
    uid = parse_user(user)
    if not yes and not typer.confirm(f"Erase all memory of user {uid}?"):
        raise typer.Exit(1)
    settings = load_settings(data_dir)
    deleted = run(_erase(admin_url(settings), uid))
    # Writes journaled during an outage must not bring the user back at the next replay.
    journal = WriteJournal.for_database(settings.data_dir, DatabaseConnector(settings).identity)
    pending = journal.drop_user(uid).items
    sessions = _erase_redis_sessions(settings, uid)
    extra = f" and {sessions} Redis session(s)" if sessions is not None else ""
    out().print(f"erased {deleted} row(s), {pending} pending write(s){extra} of user {uid}")


def _erase_redis_sessions(settings: MemorySettings, user: UUID) -> int | None:
    """Short-term sessions kept in Redis are outside the database: erase them too (None: not on Redis)."""
    if settings.session_backend != "redis":
        return None
    from ..session.redis_store import redis_sessions_from_settings  # the `redis` extra

    try:
        sessions = redis_sessions_from_settings(settings)
        try:
            return sessions.drop_user(user)
        finally:
            sessions.close()
    except MemoryPluginError as exc:
        raise fail(f"the database rows are erased, but not the Redis sessions: {exc}") from None


async def _maintain(url: str, settings: MemorySettings) -> tuple[ArchiveReport, RetentionReport]:
    from ..retention import RetentionPolicy, apply_retention

    policy = DecayPolicy(half_life_days=dict(settings.half_life_days), floor=settings.decay_floor)
    async with await MemoryAdmin.connect(url) as admin:
        archived = await admin.archive_decayed(policy)
    async with await connect(url, what="as administrator ", autocommit=True) as conn:
        return archived, await apply_retention(conn, RetentionPolicy.from_settings(settings))


@app.command("maintain")
def maintain(data_dir: DataDirOption = None) -> None:
    """Archive facts whose decayed confidence fell below MEMORY_DECAY_FLOOR, and expired facts, then apply the
    retention policy (MEMORY_RETENTION_*: raw conversation data, dead jobs, applied-write records), for all
    users, as the administrative role. Safe from cron while applications run; running it again removes nothing
    more."""
    settings = load_settings(data_dir)
    report, retention = run(_maintain(admin_url(settings), settings))
    out().print(f"archived {report.decayed} decayed and {report.expired} expired fact(s)")
    out().print(f"retention removed {retention.describe()}")
