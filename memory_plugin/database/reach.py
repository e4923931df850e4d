"""`open_pool` (and `connect`): open a psycopg pool (or one connection) and, when the database
cannot be reached, say why in one line (connection refused, authentication failed, unknown host, TLS, timed
out) instead of the pool's "pool initialization incomplete after N sec", which names no cause.

The pool retries in the background and logs every failed attempt (`psycopg.pool` warnings); the cause is
taken from one direct connection attempt made only after the pool gave up, so a healthy start costs nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import StoreUnavailableError

__all__ = ["connect", "connect_failure", "connection_cause", "open_pool", "pool_failure"]

# Substrings of libpq's / psycopg's messages, checked in order (no SQLSTATE exists for a client-side failure).
_CAUSES = (
    ("connection refused", "connection refused (is the server running, on that host and port?)"),
    ("failed to resolve host", "unknown host (check the host name in the URL)"),
    ("could not translate host name", "unknown host (check the host name in the URL)"),
    ("name or service not known", "unknown host (check the host name in the URL)"),
    ("password authentication failed", "authentication failed (check the user and password)"),
    ("ssl", "TLS failed (check sslmode and the server's certificate)"),
    ("certificate", "TLS failed (check sslmode and the server's certificate)"),
    ("no such file or directory", "no server at that socket (is it running? check the host directory)"),
    ("timeout expired", "timed out (is the host reachable, and the port open?)"),
    ("timed out", "timed out (is the host reachable, and the port open?)"),
)


def connection_cause(exc: BaseException) -> str:
    """The cause of a failed connection in a few words, with what to check."""
    state = getattr(exc, "sqlstate", None) or ""
    text = str(exc).lower()
    if state.startswith("28") or "authentication" in text or ("role" in text and "does not exist" in text):
        return "authentication failed (check the user and password)"
    if state == "3D000":
        return "unknown database (check the database name in the URL)"
    return next((cause for needle, cause in _CAUSES if needle in text), "connection failed")


async def open_pool(pool: AsyncConnectionPool[Any], url: str, *, seconds: float, what: str) -> None:
    """Open `pool` (created with `open=False`) within `seconds`; on failure close it and raise
    `StoreUnavailableError("cannot connect {what} to Postgres: <cause>: <first line of the error>")`."""
    try:
        await pool.open(wait=True, timeout=seconds)
        return
    except (PoolTimeout, psycopg.OperationalError) as exc:
        failure: BaseException = exc
    await pool.close()
    if isinstance(failure, PoolTimeout):
        kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
        failure = await _direct_failure(url, kwargs, seconds) or failure
    raise connect_failure(failure, what) from failure


def connect_failure(exc: BaseException, what: str) -> StoreUnavailableError:
    """The error for a connection attempt that failed with `exc`: "cannot connect {what}to Postgres: <cause>:
    <first line of the error>" (`what` ends with a space, e.g. "the session store ", or is empty)."""
    said = str(exc).strip().partition("\n")[0]
    return StoreUnavailableError(f"cannot connect {what}to Postgres: {connection_cause(exc)}: {said}")


async def pool_failure(error: StoreUnavailableError, url: str, *, seconds: float, what: str) -> StoreUnavailableError:
    """`error` with its cause named, for a pool opened in the background (`open(wait=False)`) whose connection
    request timed out: one direct attempt says why ("cannot connect {what}to Postgres: <cause>: …"). Any other
    error, or a direct attempt that connects (the pool was only busy), is returned as it is."""
    if not isinstance(error.__cause__, PoolTimeout):
        return error
    failure = await _direct_failure(url, {}, seconds)
    return error if failure is None else connect_failure(failure, what)


async def _direct_failure(url: str, kwargs: dict[str, Any], seconds: float) -> BaseException | None:
    """The error of one direct connection attempt (None if it connects: the pool was only slow)."""
    try:
        connection = await psycopg.AsyncConnection.connect(url, **{**kwargs, "connect_timeout": max(1, round(seconds))})
    except psycopg.Error as exc:
        return exc
    await connection.close()
    return None


async def connect(url: str, *, what: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """One connection (`psycopg.AsyncConnection.connect(url, **kwargs)`); when it fails, `connect_failure`
    names the cause (`what` as there)."""
    try:
        return await psycopg.AsyncConnection.connect(url, **kwargs)
    except psycopg.OperationalError as exc:
        raise connect_failure(exc, what) from exc
