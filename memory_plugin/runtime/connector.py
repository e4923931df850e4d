"""`DatabaseConnector`: creates a manager's Postgres store — starts the embedded server when no URL is set,
migrates (through the administrative URL when there is one), connects."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
from psycopg_pool import PoolTimeout

from ..database.admin import MemoryAdmin
from ..database.classify import is_unreachable, store_error
from ..database.embedded import EmbeddedPostgres
from ..database.migrations import migrate
from ..database.roles import ensure_app_role
from ..database.urls import database_identity
from ..errors import StoreError, StoreUnavailableError
from ..logs import LOG_PREFIX, logger
from ..settings import MemorySettings
from ..store.postgres import PostgresStore

__all__ = ["DatabaseConnector", "pool_size"]


def pool_size(settings: MemorySettings) -> int:
    """Most connections the manager's one pool opens: `pool_max_size` for the user statements (long-term
    store, slots and summaries) plus one per concurrent background job for its queue statements (claim,
    heartbeat, settle): 10 + 4 = 14 by default, where the three pools it replaces could open 10 + 4 + 4."""
    return settings.pool_max_size + settings.background_concurrency


class DatabaseConnector:
    """Creates the manager's database store: starts the embedded server when no URL is set, migrates,
    connects. `ResilientStore` calls it again in the background until it succeeds.

    On the embedded default the server's superuser migrates and `url` is its URL (what `memory-plugin db-url`
    prints, for psql and administrative work), while the store connects as the least-privileged role
    `memory_plugin_app` (see `roles`)."""

    def __init__(self, settings: MemorySettings, *, keep_running: bool = False) -> None:
        """`keep_running`: an embedded server started here stays up after this process (`memory-plugin serve`)."""
        self.settings = settings
        self.url = settings.database_url.get_secret_value() if settings.database_url is not None else None
        self._embedded: EmbeddedPostgres | None = None
        self.store: PostgresStore | None = None
        """The store of the last successful call: its pool is the one every Postgres backend shares."""
        self._supervisor: asyncio.Task[None] | None = None
        # `identity` names the database the journal belongs to, known before connecting (see `journal_path`).
        if self.url is not None:
            self.identity = database_identity(self.url)
        else:
            self._embedded = EmbeddedPostgres.from_settings(settings, keep_running=keep_running)
            self.identity = f"embedded:{self._embedded.pgdata.resolve()}/{self._embedded.database}"

    async def __call__(self) -> PostgresStore:
        self.store = await self._open()
        return self.store

    async def _open(self) -> PostgresStore:
        if self._embedded is not None:
            return await self._connect_embedded(self._embedded)
        s = self.settings
        assert self.url is not None
        store = await self._connect(self.url)
        if s.auto_migrate:
            try:
                if s.admin_database_url is not None:
                    # The service path: the application's own role may (and in production should) be unable
                    # to change the schema.
                    await self._migrate_as_admin(s.admin_database_url.get_secret_value())
                else:
                    async with store.pool.connection() as conn:
                        await migrate(conn)
            except (PoolTimeout, psycopg.OperationalError) as exc:
                await store.close()
                raise _migration_error(exc) from exc
            except BaseException:
                await store.close()
                raise
        return store

    async def _connect_embedded(self, embedded: EmbeddedPostgres) -> PostgresStore:
        try:
            admin_url = await asyncio.to_thread(embedded.start)
        except Exception as exc:  # whatever stops the server from starting, memory falls back
            raise StoreUnavailableError(f"cannot start the embedded PostgreSQL: {exc}") from exc
        logger.info("%s embedded PostgreSQL ready at %s", LOG_PREFIX, admin_url)
        self.url = admin_url
        if self.settings.auto_migrate:
            try:
                await self._migrate_as_admin(admin_url)
            except psycopg.OperationalError as exc:
                raise _migration_error(exc) from exc
        app_url = await ensure_app_role(admin_url, connect_timeout=self.settings.connect_timeout_seconds)
        store = await self._connect(app_url)
        self._supervise(store)
        return store

    async def _connect(self, url: str) -> PostgresStore:
        s = self.settings
        return await PostgresStore.connect(
            url,
            min_size=s.pool_min_size,
            max_size=pool_size(s),
            connect_timeout=s.connect_timeout_seconds,
            pooler=s.database_pooler,
        )

    async def _migrate_as_admin(self, admin_url: str) -> None:
        s = self.settings
        async with await MemoryAdmin.connect(
            admin_url, connect_timeout=s.connect_timeout_seconds, pooler=s.database_pooler
        ) as admin:
            await admin.migrate()

    async def stop_supervising(self) -> None:
        """Stop restarting the embedded server (after the store closed; the task also ends by itself then)."""
        task, self._supervisor = self._supervisor, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _supervise(self, store: PostgresStore) -> None:
        """The manager owns the embedded server: restart it whenever it dies, as long as the store is open
        (the pool reconnects by itself once the server answers again)."""
        if self._embedded is None or (self._supervisor is not None and not self._supervisor.done()):
            return
        self._supervisor = asyncio.get_running_loop().create_task(
            self._embedded.supervise(until=lambda: store.pool.closed), name="memory_plugin-embedded-supervisor"
        )


def _migration_error(exc: psycopg.OperationalError | PoolTimeout) -> StoreError:
    """An unreachable database is an outage (the manager starts in fallback and retries); a migration stopped
    by a timeout or lock is not, and says so."""
    if is_unreachable(exc):
        return StoreUnavailableError(f"cannot migrate the database: {exc}")
    return store_error(exc, "migrating the database")
