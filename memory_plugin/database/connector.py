"""`DatabaseConnector`: creates a manager's Postgres store — starts the embedded server when no URL is set,
connects, migrates (through the administrative URL when one is set)."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg_pool import PoolTimeout

from ..errors import StoreUnavailableError
from ..logs import LOG_PREFIX, logger
from ..outage.journal import database_identity
from ..settings import MemorySettings
from ..store.postgres import PostgresStore
from .admin import MemoryAdmin
from .embedded import EmbeddedPostgres
from .migrations import migrate

__all__ = ["DatabaseConnector"]


class DatabaseConnector:
    """Creates the manager's database store: starts the embedded server when no URL is set, connects,
    migrates. `ResilientStore` calls it again in the background until it succeeds."""

    def __init__(self, settings: MemorySettings) -> None:
        self.settings = settings
        self.url = settings.database_url.get_secret_value() if settings.database_url is not None else None
        self._embedded: EmbeddedPostgres | None = None
        self._supervisor: asyncio.Task[None] | None = None
        # `identity` names the database the journal belongs to, known before connecting (see `journal_path`).
        if self.url is not None:
            self.identity = database_identity(self.url)
        else:
            self._embedded = EmbeddedPostgres.from_settings(settings)
            self.identity = f"embedded:{self._embedded.pgdata.resolve()}/{self._embedded.database}"

    async def __call__(self) -> PostgresStore:
        s = self.settings
        url = self.url
        if self._embedded is not None:
            try:
                url = await asyncio.to_thread(self._embedded.start)
            except Exception as exc:  # whatever stops the server from starting, memory falls back
                raise StoreUnavailableError(f"cannot start the embedded PostgreSQL: {exc}") from exc
            logger.info("%s embedded PostgreSQL ready at %s", LOG_PREFIX, url)
            self.url = url
        assert url is not None
        store = await PostgresStore.connect(
            url, min_size=s.pool_min_size, max_size=s.pool_max_size, connect_timeout=s.connect_timeout_seconds
        )
        if s.auto_migrate:
            try:
                if s.admin_database_url is not None:
                    # The service path: the application's own role may (and in production should) be unable
                    # to change the schema.
                    async with await MemoryAdmin.connect(
                        s.admin_database_url.get_secret_value(), connect_timeout=s.connect_timeout_seconds
                    ) as admin:
                        await admin.migrate()
                else:
                    async with store.pool.connection() as conn:
                        await migrate(conn)
            except (PoolTimeout, psycopg.OperationalError) as exc:
                await store.close()
                raise StoreUnavailableError(f"cannot migrate the database: {exc}") from exc
            except BaseException:
                await store.close()
                raise
        self._supervise(store)
        return store

    def _supervise(self, store: PostgresStore) -> None:
        """The manager owns the embedded server: restart it whenever it dies, as long as the store is open
        (the pool reconnects by itself once the server answers again)."""
        if self._embedded is None or (self._supervisor is not None and not self._supervisor.done()):
            return
        self._supervisor = asyncio.get_running_loop().create_task(
            self._embedded.supervise(until=lambda: store.pool.closed), name="memory_plugin-embedded-supervisor"
        )
