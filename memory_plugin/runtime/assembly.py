"""`assemble`: the manager's composition root. It chooses and opens the backends a manager runs on: the
long-term store (the embedded server or `database_url`, migrated, wrapped in `ResilientStore` unless
`resilient_store=False`), the session backend, and the ONE psycopg pool every Postgres backend of the process
shares (store, sessions, job queue, slots and summaries): the caller hands the pool in, backends never open
their own.

The shared pool connects as the store's role (`memory_plugin_app` on the embedded default); the sessions, the
queue and the context store switch role per transaction or statement, transaction-locally, as the store does
(`memory_worker`, `authenticated` with the user's claims), so least privilege is unchanged. Only when the
database was down at start (the store in fallback, no pool yet) does the Postgres session store open a pool of
its own, as `memory_worker` from the connection's start (`database/roles.worker_role_url`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..database.pooler import transaction_pooled
from ..database.roles import library_url, worker_role_url
from ..errors import MemoryPluginError
from ..outage import ResilientStore, WriteJournal
from ..session import SessionBackend
from ..settings import MemorySettings
from ..store import LongTermStore
from ..store.postgres import PostgresStore
from ..store.sealed import sealed_if_keys
from .connector import DatabaseConnector

__all__ = ["Assembly", "SharedPool", "assemble"]

SharedPool = AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]
"""The one pool: autocommit, rows as dicts (`store/postgres.py` opens it)."""


@dataclass
class Assembly:
    """What `assemble` opened for one manager."""

    settings: MemorySettings
    store: LongTermStore
    """The long-term store (started: connected, or in fallback with the journal replayed)."""
    sessions: SessionBackend | None
    """The session backend the settings chose (None: the manager's in-process default)."""
    connector: DatabaseConnector | None
    """The database connector (None when a store was passed in)."""

    def library_url(self) -> str | None:
        """The URL of the library's own connections: the store's role, never the embedded server's superuser
        (None without a database)."""
        return _library_url(self.settings, self.connector)

    def database(self) -> PostgresStore | None:
        """The Postgres store on the one pool, as the library's role (None: a store passed in, or the database
        down at start)."""
        if self.connector is None or self.connector.store is None or self.connector.store.pool.closed:
            return None
        return self.connector.store

    def pool(self) -> SharedPool | None:
        """The shared pool, once the store reached the database (None: a store passed in, or a database
        down at start: the queue then runs in RAM and the context store on a pool of its own, as before)."""
        return _shared_pool(self.connector)


def _shared_pool(connector: DatabaseConnector | None) -> SharedPool | None:
    if connector is None or connector.store is None or connector.store.pool.closed:
        return None
    return connector.store.pool


def _library_url(settings: MemorySettings, connector: DatabaseConnector | None) -> str | None:
    if connector is None or connector.url is None:
        return None
    return library_url(connector.url, embedded=settings.database_url is None)


async def assemble(
    settings: MemorySettings, *, store: LongTermStore | None = None, keep_running: bool = False
) -> Assembly:
    """Open the backends `settings` choose (a `store` passed in is used as is: no database, no shared pool).
    `keep_running`: an embedded server started here stays up after the process (`memory-plugin serve`).
    Closes what it opened if a later step fails."""
    connector: DatabaseConnector | None = None
    if store is None:
        connector = DatabaseConnector(settings, keep_running=keep_running)
        if settings.resilient_store:
            store = ResilientStore(
                None,
                WriteJournal.for_database(settings.data_dir, connector.identity),
                connect=connector,
                primary_name="postgres",
                require_primary=settings.require_pg_memory,
                cache_size=settings.fallback_cache_users,
                retry_base_seconds=settings.retry_base_seconds,
                retry_max_seconds=settings.retry_max_seconds,
                log_interval_seconds=settings.outage_log_interval_seconds,
                close_flush_seconds=settings.connect_timeout_seconds,
            )
        else:
            store = await connector()
    # Outside the outage wrapper: its journal and cache hold sealed text too.
    store = sealed_if_keys(store, settings)
    try:
        await store.start()  # a resilient store connects (or falls back) and replays an earlier run's journal
        sessions = await _sessions(settings, connector, _shared_pool(connector))
    except BaseException:
        await store.close()
        raise
    return Assembly(settings, store, sessions, connector)


async def _sessions(
    settings: MemorySettings, connector: DatabaseConnector | None, pool: SharedPool | None
) -> SessionBackend | None:
    if settings.session_backend == "postgres":  # shared by every worker: on the database in use
        from ..session.postgres_store import postgres_sessions_from_settings

        if pool is not None:
            return postgres_sessions_from_settings(settings, pool=pool)
        url = _library_url(settings, connector)
        if url is None:
            raise MemoryPluginError(
                "MEMORY_SESSION_BACKEND=postgres keeps sessions in the manager's own database: set"
                " MEMORY_DATABASE_URL or let the manager start the embedded one (do not pass store=)"
            )
        # As memory_worker (a startup option, which a transaction-mode pooler may not pass on: there the
        # URL's own role is used).
        if not transaction_pooled(url, settings.database_pooler):
            url = worker_role_url(url)
        return await asyncio.to_thread(postgres_sessions_from_settings, settings, url)
    if settings.session_backend == "redis":  # shared by every worker: on the deployment's Redis
        from ..session.redis_store import redis_sessions_from_settings

        return await asyncio.to_thread(redis_sessions_from_settings, settings)
    return None
