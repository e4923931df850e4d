"""Where the memory is kept: the Postgres connection (`settings.database`) and the Supabase API of `SupabaseStore`
(`settings.supabase`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, SecretStr, ValidationInfo, field_validator

from .flat import Flat, SettingsGroup

__all__ = [
    "DatabaseNames",
    "DatabasePooler",
    "DatabaseSettings",
    "SupabaseNames",
    "SupabaseSettings",
    "default_data_dir",
]

DatabasePooler = Literal["auto", "transaction", "session", "none"]
"""The connection pooler in front of the database URLs (`settings.database.pooler`)."""


def default_data_dir() -> Path:
    """The user data directory of `memory-plugin`, where the embedded PostgreSQL lives when `data_dir` is unset."""
    return Path(platformdirs.user_data_dir("memory-plugin", appauthor=False))


_EMPTY_EXAMPLES = {
    "data_dir": "MEMORY_DATA_DIR=~/.local/share/memory-plugin",
    "url": "MEMORY_DATABASE_URL=postgresql://memory_plugin_app.<project ref>:<password>@<pooler host>:6543/postgres",
    "admin_url": "MEMORY_ADMIN_DATABASE_URL=postgresql://postgres.<project ref>:<password>@<pooler host>:5432/postgres",
}
"""A value for each setting an empty variable is refused for, shown in the refusal."""


class DatabaseSettings(SettingsGroup):
    """The Postgres the memory uses (`settings.database`): its URLs, the embedded server, the pool."""

    url: SecretStr | None = None
    """Postgres to use (for example a Supabase project's connection string). When unset, the manager starts
    an embedded PostgreSQL under `data_dir` and migrates it itself."""

    data_dir: Path = Field(default_factory=default_data_dir)
    """Where the embedded PostgreSQL keeps its files, and the outage journal (`journal/`)."""

    embedded_shared_buffers_mb: int | None = Field(default=None, ge=16)
    """The embedded PostgreSQL's `shared_buffers` in MB; None: a quarter of the machine's memory, between 128 MB
    and 1 GB (applied when the server starts)."""

    auto_migrate: bool = True
    """Apply `supabase/migrations/` on open. Already-applied versions are skipped, using the same
    `supabase_migrations.schema_migrations` table as the Supabase CLI, so both can be mixed."""

    admin_url: SecretStr | None = None
    """An administrative role's connection string, for the service path (`MemoryAdmin`: migrations,
    erasing a user). Set it when `database_url` uses the least-privileged application role of
    `supabase/roles/memory_plugin_app.sql`; when unset, migrations run over `database_url`. With
    `auto_migrate`, the manager applies migrations through this URL when it is set."""

    pool_min_size: int = Field(default=1, ge=0)
    """Connections the pool keeps open."""

    pool_max_size: int = Field(default=10, ge=1)
    """Connections for user statements; the manager's one pool adds `background_concurrency` for the job queue."""

    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    """How long to wait for a connection before raising `StoreUnavailableError`."""

    pooler: DatabasePooler = "auto"
    """The connection pooler in front of the database URLs (docs/supabase.md): `transaction` (Supavisor's port
    6543, PgBouncer's transaction mode) turns psycopg's prepared statements off on every connection the plugin
    opens, which such a pooler cannot keep; `session` and `none` change nothing; `auto`: `transaction` when the
    URL's port is 6543. Env `MEMORY_DATABASE_POOLER`."""

    @field_validator("data_dir", "url", "admin_url", mode="before")
    @classmethod
    def _not_empty(cls, value: object, info: ValidationInfo) -> object:
        # An empty variable is a mistake, not a choice: MEMORY_DATA_DIR="" made a cluster in the current
        # directory, MEMORY_DATABASE_URL="" ran without any database. Unset means the default.
        if isinstance(value, str) and not value.strip():
            example = _EMPTY_EXAMPLES[str(info.field_name)]
            name = example.partition("=")[0]
            raise ValueError(f"{name} is empty: unset it for the default, or give a value, e.g. {example}")
        return value


class DatabaseNames:
    """The flat names (and `MEMORY_*` variables) of `DatabaseSettings`' fields."""

    database_url = Flat[SecretStr | None]("database.url")
    data_dir = Flat[Path]("database.data_dir")
    embedded_shared_buffers_mb = Flat[int | None]("database.embedded_shared_buffers_mb")
    auto_migrate = Flat[bool]("database.auto_migrate")
    admin_database_url = Flat[SecretStr | None]("database.admin_url")
    pool_min_size = Flat[int]("database.pool_min_size")
    pool_max_size = Flat[int]("database.pool_max_size")
    connect_timeout_seconds = Flat[float]("database.connect_timeout_seconds")
    database_pooler = Flat[DatabasePooler]("database.pooler")


class SupabaseSettings(SettingsGroup):
    """The Supabase API (`settings.supabase`), for deployments that reach the database only through the project's
    REST API (PostgREST) with the anon key and each user's own JWT; see `SupabaseStore.from_settings`. No service
    key is ever read."""

    url: str | None = None
    """The Supabase project URL, e.g. `https://abcd.supabase.co` (used only by `SupabaseStore`)."""

    anon_key: SecretStr | None = None
    """The project's anon (publishable) key, sent as `apikey`; user data is always requested with the user's
    own access token, never with this key alone."""

    timeout_seconds: float = Field(default=5.0, gt=0)
    """Timeout of each request to the Supabase API (connect, read, write, pool); beyond it the operation
    raises `StoreUnavailableError`."""


class SupabaseNames:
    """The flat names (and `MEMORY_*` variables) of `SupabaseSettings`' fields."""

    supabase_url = Flat[str | None]("supabase.url")
    supabase_anon_key = Flat[SecretStr | None]("supabase.anon_key")
    supabase_timeout_seconds = Flat[float]("supabase.timeout_seconds")
