"""The user's memory switch (table `memory_private.memory_consent`) and the notice an application shows.

While a user's memory is paused nothing new is stored about them — facts, notes, slots, summaries, chats,
extraction — and reads go on. The switch is in the database, which refuses such a write in its own statement
(`supabase/schemas/81_memory_consent.sql`), so every process sees a pause at once; on a manager without a
database (`InMemoryStore`) it lives in the process and the manager checks it before each write.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from .database.calls import postgres_errors, run_as_user
from .database.reach import pool_failure
from .errors import StoreUnavailableError
from .logs import LOG_PREFIX, logger

__all__ = ["MEMORY_NOTICE", "ConsentStore", "memory_notice"]

MEMORY_NOTICE = {
    "en": (
        "This assistant remembers what you tell it (facts, preferences, a summary of your conversations) to help"
        " you in later conversations. You can see, export or delete everything it keeps, and pause it at any"
        " time: while paused, nothing new is stored."
    ),
    "es": (
        "Este asistente recuerda lo que le cuentas (datos, preferencias, un resumen de tus conversaciones) para"
        " ayudarte en conversaciones futuras. Puedes ver, exportar o borrar todo lo que guarda, y pausarlo cuando"
        " quieras: mientras está en pausa no guarda nada nuevo."
    ),
}
"""The notice that memory is kept, for the application to show the user (English and Spanish)."""


def memory_notice(language: str = "en") -> str:
    """`MEMORY_NOTICE` in `language` (`en` or `es`; English for any other)."""
    return MEMORY_NOTICE.get(language.split("-")[0].lower(), MEMORY_NOTICE["en"])


CACHE_SECONDS = 2.0
"""A switch read is reused this long by this process (before an extraction, which a pause makes pointless; the
writes themselves are refused by the database at once). Reading it at every write cost +12 ms at p50 on
`update_memory` on a loaded 2-core machine."""
CACHE_USERS = 10_000

READ_SQL = "select paused from memory_private.memory_consent where user_id = %(uid)s"
WRITE_SQL = (
    "insert into memory_private.memory_consent (user_id, paused) values (%(uid)s, %(paused)s)"
    " on conflict (user_id) do update set paused = excluded.paused, updated_at = now()"
)


class ConsentStore:
    """Reads and sets the switch as the user, under row-level security (a small pool of its own, or one given)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        timeout: float = 5.0,
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._pool = pool
        self._owned = pool is None and url is not None
        self._local: dict[UUID, bool] = {}
        self._read_at: dict[UUID, float] = {}
        self._cache_seconds = cache_seconds

    async def _get_pool(self) -> AsyncConnectionPool[Any] | None:
        if self._pool is None and self._url is not None:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self._url, min_size=1, max_size=2, open=False, kwargs={"autocommit": True}
            )
            await pool.open(wait=False)  # connects in the background: a database down now must not stop a write
            self._pool = pool
        return self._pool

    @property
    def enforced_by_database(self) -> bool:
        """Whether the switch is in a database, which refuses a paused user's writes in the write's own statement
        (SQLSTATE PT423, `StorePausedError`): a writer then need not read it first."""
        return self._pool is not None or self._url is not None

    async def paused(self, user_id: UUID) -> bool:
        """Whether the user's memory is paused now."""
        pool = await self._get_pool()
        if pool is None:
            return self._local.get(user_id, False)
        read_at = self._read_at.get(user_id)
        if read_at is not None and time.monotonic() - read_at < self._cache_seconds:
            return self._local[user_id]
        try:
            try:
                with postgres_errors("reading the memory switch"):
                    async with pool.connection(timeout=self._timeout) as conn:
                        [(rows, _)] = await run_as_user(conn, user_id, [READ_SQL], {"uid": user_id})
            except StoreUnavailableError as exc:
                raise await self._named(exc) from exc.__cause__
        except StoreUnavailableError as exc:
            # The database is down: writes go to the outage journal, as every write does then; the switch is
            # the last one this process read (memory on when it never read one).
            logger.warning("%s memory switch unreadable, using the last one read: %s", LOG_PREFIX, exc)
            return self._local.get(user_id, False)
        row = rows[0] if rows else None  # a tuple, or a dict on a pool of dict rows (the REST API's)
        paused = bool(row is not None and (row["paused"] if isinstance(row, dict) else row[0]))
        self._local[user_id] = paused
        self._read_at[user_id] = time.monotonic()
        if len(self._read_at) > CACHE_USERS:
            self._read_at.pop(next(iter(self._read_at)))
        return paused

    async def set_paused(self, user_id: UUID, paused: bool) -> None:
        """Pause (True) or resume (False) the user's memory."""
        pool = await self._get_pool()
        if pool is None:
            self._local[user_id] = paused
            return
        try:
            with postgres_errors("setting the memory switch"):
                async with pool.connection(timeout=self._timeout) as conn:
                    await run_as_user(conn, user_id, [WRITE_SQL], {"uid": user_id, "paused": paused})
        except StoreUnavailableError as exc:
            raise await self._named(exc) from exc.__cause__
        self._local[user_id] = paused
        self._read_at[user_id] = time.monotonic()

    async def _named(self, error: StoreUnavailableError) -> StoreUnavailableError:
        """Name the cause when this store's own pool, opened in the background, cannot connect (a given pool's
        owner names it when it opens)."""
        if not self._owned or self._url is None:
            return error
        return await pool_failure(error, self._url, seconds=self._timeout, what="the memory switch ")

    async def close(self) -> None:
        """Close the pool if it is this store's own."""
        if self._owned and self._pool is not None:
            await self._pool.close()
            self._pool = None
