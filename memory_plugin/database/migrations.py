"""Apply `supabase/migrations/*.sql` to a Postgres database, as the Supabase CLI would.

One source of truth: the same files `supabase db push` applies. Applied versions are recorded in
`supabase_migrations.schema_migrations` (the CLI's own table), each file runs in one transaction, and an
advisory lock keeps two processes from migrating at once. On a plain PostgreSQL (the embedded default,
the tests) the Supabase auth shim is applied first; on Supabase it already exists and is left alone.

The first migration is a baseline that creates the whole schema. A database migrated by the unreleased
files that preceded it (`SUPERSEDED_VERSIONS`) already has tables of the same names in an older shape:
migrating it raises `MigrationError` with what to do, rather than applying the baseline on top of it or
rewriting memory that a person may still want to export.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

from ..errors import StoreError
from ..logs import LOG_PREFIX, logger

__all__ = [
    "SUPERSEDED_VERSIONS",
    "Migration",
    "MigrationError",
    "auth_shim_path",
    "load_migrations",
    "migrate",
    "migrations_dir",
    "sql_root",
]

# Any constant works; it only has to be the same for every process migrating this database.
_MIGRATION_LOCK_KEY = 7_441_201_123

CREATE_MIGRATIONS_TABLE_SQL = """
create schema if not exists supabase_migrations;
create table if not exists supabase_migrations.schema_migrations (
    version text primary key,
    statements text[],
    name text
);
"""
APPLIED_VERSIONS_SQL = "select version from supabase_migrations.schema_migrations"
RECORD_VERSION_SQL = "insert into supabase_migrations.schema_migrations (version, statements, name) values (%s, %s, %s)"
AUTH_UID_EXISTS_SQL = "select to_regprocedure('auth.uid()') is not null"

SUPERSEDED_VERSIONS = frozenset(
    {
        "20261122120000",
        "20261122130000",
        "20261123090000",
        "20261123095000",
        "20261123100000",
        "20261123120000",
        "20261123180000",
        "20261123200000",
    }
)
"""Versions of the pre-release migration files that the baseline replaced (never published)."""


class MigrationError(StoreError):
    """The database's schema cannot be brought to this version by applying migrations."""


def sql_root() -> Path:
    """`supabase/` in a source checkout, or the copy packaged inside the wheel."""
    checkout = Path(__file__).resolve().parents[2] / "supabase"
    if (checkout / "migrations").is_dir():
        return checkout
    return Path(__file__).resolve().parents[1] / "_sql"


def migrations_dir() -> Path:
    """The directory holding the timestamped migration files."""
    return sql_root() / "migrations"


def auth_shim_path() -> Path:
    """The SQL providing Supabase's roles and `auth.uid()` on a plain PostgreSQL."""
    return sql_root() / "embedded" / "auth_shim.sql"


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: `<version>_<name>.sql`."""

    version: str
    name: str
    sql: str


def load_migrations(directory: Path | None = None) -> list[Migration]:
    """The migration files in version order."""
    directory = directory or migrations_dir()
    migrations = []
    for path in sorted(directory.glob("*.sql")):
        version, _, name = path.stem.partition("_")
        migrations.append(Migration(version=version, name=name, sql=path.read_text(encoding="utf-8")))
    return migrations


async def migrate(conn: AsyncConnection[object], directory: Path | None = None) -> list[str]:
    """Apply the pending migrations; returns the versions applied now. `conn` must be in autocommit mode."""
    applied_now: list[str] = []
    await conn.execute("select pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
    try:
        # Tuple rows whatever the connection's row factory (the store's pool uses dict rows).
        cursor = conn.cursor(row_factory=tuple_row)
        await cursor.execute(AUTH_UID_EXISTS_SQL)
        row = await cursor.fetchone()
        if not (row and row[0]):
            async with conn.transaction():
                await conn.execute(auth_shim_path().read_text(encoding="utf-8"))
            logger.info("%s applied the Supabase auth shim (plain PostgreSQL)", LOG_PREFIX)
        await conn.execute(CREATE_MIGRATIONS_TABLE_SQL)
        await cursor.execute(APPLIED_VERSIONS_SQL)
        done = {r[0] for r in await cursor.fetchall()}
        if stale := sorted(done & SUPERSEDED_VERSIONS):
            raise MigrationError(
                f"this database holds memory_plugin's schema from pre-release migration files ({', '.join(stale)}),"
                " which the baseline migration replaced. Export what you need (MEMORY_AUTO_MIGRATE=false, then psql"
                " on `memory-plugin db-url`), then"
                " recreate the database: for the embedded default, stop it and delete"
                " <MEMORY_DATA_DIR>/postgres; on Supabase, `supabase db reset` or drop the memory_plugin tables,"
                " functions and the rows of those versions in supabase_migrations.schema_migrations."
            )
        for migration in load_migrations(directory):
            if migration.version in done:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(RECORD_VERSION_SQL, (migration.version, [migration.sql], migration.name))
            applied_now.append(migration.version)
            logger.info("%s applied migration %s_%s", LOG_PREFIX, migration.version, migration.name)
    finally:
        await conn.execute("select pg_advisory_unlock(%s)", (_MIGRATION_LOCK_KEY,))
    return applied_now
