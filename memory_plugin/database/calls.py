"""Statements on Postgres: as one user under row-level security, in one round trip; psycopg's failures as the
plugin's errors. Every Postgres-backed piece (the memory store, chats, checkpoints, context memory, the job
queue) runs its statements through these."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
from psycopg import AsyncClientCursor, pq
from psycopg_pool import PoolTimeout

from ..errors import StoreLimitError, StorePausedError
from .classify import store_error

__all__ = [
    "IDENTITY_PRELUDE_SQL",
    "bound_refusal",
    "postgres_errors",
    "run_after_prelude",
    "run_as_user",
    "user_claims",
]

# The refusals of the database's own bounds (supabase/schemas/15_memory_bounds.sql): a count limit, the write rate.
_LIMIT_SQLSTATE = "PT413"
_RATE_SQLSTATE = "PT429"
_PAUSED_SQLSTATE = "PT423"  # the memory switch (supabase/schemas/81_memory_consent.sql)

# Transaction-local (the `true`), like PostgREST: nothing leaks to the next user of the pooled connection.
IDENTITY_PRELUDE_SQL = "select set_config('role', 'authenticated', true), set_config('request.jwt.claims', %s, true)"


def user_claims(user_id: UUID) -> str:
    """The JWT claims PostgREST would set for `user_id`'s requests, as JSON."""
    return json.dumps({"sub": str(user_id), "role": "authenticated"})


@contextmanager
def postgres_errors(doing: str) -> Iterator[None]:
    """psycopg's failures as `StoreUnavailableError` (no connection, unreachable), `StatementLimitError` (this
    statement over a timeout or size limit) or `StoreError` (refused), saying what was being done (see
    `classify`)."""
    try:
        yield
    except psycopg.Error as exc:
        refusal = bound_refusal(exc.sqlstate, str(exc), exc.diag.message_detail, exc.diag.constraint_name)
        raise (refusal or store_error(exc, doing)) from exc
    except PoolTimeout as exc:
        raise store_error(exc, doing) from exc


def bound_refusal(
    sqlstate: str | None, message: str, detail: str | None, constraint: str | None
) -> StoreLimitError | StorePausedError | None:
    """The database's refusal of a write past one of its bounds as `StoreLimitError` (None for other errors):
    PT413 (a count per user), PT429 (the write rate; DETAIL `retry_after=<seconds>`), or a check violation of
    a constraint named `*_bound` (a size); PT423, a write about a user who paused their memory, as
    `StorePausedError`."""
    if sqlstate == _PAUSED_SQLSTATE:
        return StorePausedError(message)
    if sqlstate == _RATE_SQLSTATE:
        wait = (detail or "").removeprefix("retry_after=")
        return StoreLimitError(message, retry_after=float(wait) if wait.replace(".", "", 1).isdigit() else None)
    if sqlstate == _LIMIT_SQLSTATE:
        return StoreLimitError(message)
    if sqlstate == "23514" and (constraint or "").endswith("_bound"):
        return StoreLimitError(f"a size limit of the database was passed ({constraint}): {message}")
    return None


async def run_after_prelude(
    conn: psycopg.AsyncConnection[Any], prelude: str, prelude_params: Sequence[Any], query: str, params: Sequence[Any]
) -> tuple[list[Any], int]:
    """`prelude` (a role switch) then `query`, in one simple-protocol message: PostgreSQL runs it as one implicit
    transaction, so the transaction-local role and claims cover the statement and vanish with it (also on
    error), and the prelude costs no extra round trip. Client-side binding (libpq quoting) is what allows
    parameters in a multi-statement message. Returns the statement's rows and row count."""
    cursor = AsyncClientCursor(conn)
    await cursor.execute(f"{prelude}; {query}", (*prelude_params, *params))
    cursor.nextset()
    return (await cursor.fetchall() if _has_rows(cursor) else []), cursor.rowcount


async def run_as_user(
    conn: psycopg.AsyncConnection[Any], user_id: UUID, statements: Sequence[str], params: Mapping[str, Any]
) -> list[tuple[list[Any], int]]:
    """`statements` with named parameters, as `user_id` under RLS: after the identity prelude, in one message
    (one implicit transaction, as `run_after_prelude`). Returns each statement's rows and row count."""
    prelude = IDENTITY_PRELUDE_SQL.replace("%s", "%(claims)s")
    cursor = AsyncClientCursor(conn)
    await cursor.execute("; ".join([prelude, *statements]), {**params, "claims": user_claims(user_id)})
    results: list[tuple[list[Any], int]] = []
    while cursor.nextset():  # the prelude's own result is skipped
        results.append(((await cursor.fetchall() if _has_rows(cursor) else []), cursor.rowcount))
    return results


def _has_rows(cursor: AsyncClientCursor[Any]) -> bool:
    """Whether the cursor's current result is a row set (a SELECT or RETURNING, not a bare DELETE): what
    `cursor.description is not None` says, without building its `Column` objects (29 for a stored row:
    ~24 µs of client CPU a statement at load ~10)."""
    result = cursor.pgresult
    return result is not None and (result.nfields > 0 or result.status == pq.ExecStatus.TUPLES_OK)
