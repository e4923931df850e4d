"""Per-session rolling summaries are pruned by count and age on Postgres, so a long-time user keeps writing
session summaries instead of reaching the database's per-user limit of summary rows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
import pytest_asyncio
from psycopg_pool import AsyncConnectionPool

from memory_plugin.context import store as context_store
from memory_plugin.context.store import PostgresContextStore, session_scope

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def store(database_url: str) -> AsyncIterator[PostgresContextStore]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
    await pool.open(wait=True)
    try:
        yield PostgresContextStore(pool)
    finally:
        await pool.close()


def scopes(admin_conn: psycopg.Connection[tuple[Any, ...]], user: Any) -> set[str]:
    rows = admin_conn.execute("select distinct scope from public.memory_summaries where user_id = %s", (user,))
    return {row[0] for row in rows.fetchall()}


async def add(store: PostgresContextStore, user: Any, scope: str) -> None:
    await store.add_summary(user, scope, f"summary of {scope}", kind="extractive", language="es", message_count=2)


async def test_only_the_newest_sessions_keep_their_summaries_and_the_users_own_stays(
    store: PostgresContextStore,
    admin_conn: psycopg.Connection[tuple[Any, ...]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(context_store, "SESSION_SUMMARIES_KEPT", 3)
    user = uuid4()
    await add(store, user, "user")
    for i in range(6):
        await add(store, user, session_scope(f"s{i}"))
    assert scopes(admin_conn, user) == {"user", *(session_scope(f"s{i}") for i in (3, 4, 5))}


async def test_a_session_summary_past_the_age_limit_goes_at_the_next_session_summary(
    store: PostgresContextStore, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    user = uuid4()
    await add(store, user, session_scope("old"))
    await add(store, user, session_scope("recent"))
    admin_conn.execute(
        "update public.memory_summaries set created_at = now() - interval '100 days' where user_id = %s and scope = %s",
        (user, session_scope("old")),
    )
    await add(store, user, session_scope("new"))
    assert scopes(admin_conn, user) == {session_scope("recent"), session_scope("new")}
