"""The administrative connection sorts its failures as the store does (`database/classify.py`): an erase or a
maintenance run stopped by its `statement_timeout` is a `StatementLimitError` naming the limit (the database
answered; nothing was erased), never "Postgres is unreachable"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from memory_plugin import PostgresStore, StatementLimitError, StoreUnavailableError
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.quality.decay import DecayPolicy
from memory_plugin.quality.rules import WriteRules
from tests.connection_urls import broken_url
from tests.test_statement_limits import items

pytestmark = pytest.mark.asyncio(loop_scope="session")

AdminConn = psycopg.Connection[tuple[Any, ...]]
SLOW = "borrado-lento:"

SLOW_DELETE_SQL = f"""
create schema if not exists test_slow_delete;
create or replace function test_slow_delete.sleep_on_delete() returns trigger language plpgsql as $$
begin
    perform pg_sleep(3);
    return old;
end $$;
drop trigger if exists test_slow_delete on public.user_memory;
create trigger test_slow_delete before delete on public.user_memory
    for each row when (old.content like '{SLOW}%') execute function test_slow_delete.sleep_on_delete();
"""


@pytest.fixture
def slow_deletes(admin_conn: AdminConn) -> Iterator[None]:
    """Deleting a row whose content starts with "borrado-lento:" takes 3 s (any other delete is unaffected)."""
    admin_conn.execute(SLOW_DELETE_SQL)
    yield
    admin_conn.execute("drop trigger if exists test_slow_delete on public.user_memory")
    admin_conn.execute("drop schema test_slow_delete cascade")


async def add_facts(database_url: str, user: UUID, *contents: str) -> None:
    store = await PostgresStore.connect(database_url, max_size=1)
    try:
        for content in contents:
            await store.upsert(user, items(content), WriteRules())
    finally:
        await store.close()


@pytest.mark.slow
async def test_an_erase_over_the_statement_timeout_is_a_limit_not_an_outage(
    database_url: str, admin_conn: AdminConn, slow_deletes: None
) -> None:
    user = uuid4()
    await add_facts(database_url, user, f"{SLOW} prefiere latón", "Prefiere bronce")
    timed = make_conninfo(database_url, options="-c statement_timeout=1000")
    async with await MemoryAdmin.connect(timed) as admin:
        with pytest.raises(StatementLimitError) as raised:
            await admin.erase_user(user)
        assert not isinstance(raised.value, StoreUnavailableError)
        assert raised.value.limit == "statement_timeout"
        assert "erasing user" in str(raised.value)
        # The connection is still usable, and the erase was one transaction: nothing of it was applied.
        report = await admin.archive_decayed(DecayPolicy())
        assert report.decayed >= 0
    found = admin_conn.execute("select count(*) from public.user_memory where user_id = %s", (user,)).fetchone()
    assert found == (2,)


async def test_an_unreachable_database_is_still_an_outage(database_url: str) -> None:
    async with await MemoryAdmin.connect(database_url) as admin:
        await admin._conn.close()  # the server went away under the connection
        with pytest.raises(StoreUnavailableError):
            await admin.erase_user(uuid4())


@pytest.mark.parametrize(
    ("where", "cause"),
    [("port", "connection refused"), ("password", "authentication failed"), ("host", "unknown host")],
)
async def test_the_administrator_connection_names_its_cause(database_url: str, where: str, cause: str) -> None:
    url = broken_url(database_url, where)
    with pytest.raises(StoreUnavailableError) as raised:
        await MemoryAdmin.connect(url, connect_timeout=2)
    assert f"cannot connect as administrator to Postgres: {cause}" in str(raised.value)
