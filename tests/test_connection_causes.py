"""Every connection the library opens names the cause of a failure (refused, authentication, unknown host) in
one line, as the store's and the queue's pools do (`database/reach.py`): the Postgres session store, the
context store, export and import, the API's start, the administrative connection and the role set-up. Before,
these raised psycopg's raw error, or the pool's "pool initialization incomplete after N sec"."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest

from memory_plugin import MemoryManager, StoreUnavailableError
from memory_plugin.consent import ConsentStore
from memory_plugin.context.store import PostgresContextStore
from memory_plugin.database.roles import ensure_app_role
from memory_plugin.export import export_from_url
from memory_plugin.session.postgres_store import PostgresSessionStore
from memory_plugin.settings import MemorySettings
from tests.connection_urls import broken_url

pytestmark = pytest.mark.asyncio(loop_scope="session")

CAUSES = [("port", "connection refused"), ("password", "authentication failed")]


def said_once(error: BaseException, what: str, cause: str, *, doing: str = "") -> None:
    message = str(error)
    assert message.startswith(f"{doing}cannot connect {what}to Postgres: {cause}"), message
    assert "pool initialization incomplete" not in message
    assert message.count("\n") == 0


@pytest.mark.parametrize(("where", "cause"), CAUSES)
async def test_the_session_store_names_the_cause(database_url: str, where: str, cause: str) -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        PostgresSessionStore.connect(broken_url(database_url, where), connect_timeout=2)
    said_once(raised.value, "the session store ", cause)


@pytest.mark.parametrize(("where", "cause"), CAUSES)
async def test_the_context_store_names_the_cause(database_url: str, where: str, cause: str) -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        await PostgresContextStore.connect(broken_url(database_url, where), connect_timeout=2)
    said_once(raised.value, "the context store ", cause)


@pytest.mark.parametrize(("where", "cause"), CAUSES)
async def test_export_names_the_cause(database_url: str, where: str, cause: str) -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        async for _ in export_from_url(broken_url(database_url, where), uuid4(), as_user=False, connect_timeout=2):
            pass
    said_once(raised.value, "for the export ", cause)


@pytest.mark.parametrize(("where", "cause"), CAUSES)
async def test_the_api_start_and_the_role_set_up_name_the_cause(
    database_url: str, tmp_path: Path, where: str, cause: str
) -> None:
    url = broken_url(database_url, where)
    settings = MemorySettings(  # as `serve` opens it: the database must answer at start
        database_url=url, data_dir=tmp_path, connect_timeout_seconds=2, require_pg_memory=True, embedding_model="none"
    )
    with pytest.raises(StoreUnavailableError) as raised:  # the API's start: its manager and one pool
        async with MemoryManager.open(settings, keep_running=True):
            pass
    said_once(raised.value, "", cause, doing="connecting: ")  # the manager says what it was doing
    with pytest.raises(StoreUnavailableError) as raised:
        await ensure_app_role(url, connect_timeout=2)
    said_once(raised.value, "as administrator ", cause)


@pytest.mark.parametrize(("where", "cause"), CAUSES)
async def test_the_memory_switch_names_the_cause(database_url: str, where: str, cause: str) -> None:
    """Its own pool connects in the background (a database down must not stop a write), so the cause is found
    when a connection is asked for and the pool gives up."""
    switch = ConsentStore(broken_url(database_url, where), timeout=1)
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            await switch.set_paused(uuid4(), True)
    finally:
        await switch.close()
    said_once(raised.value, "the memory switch ", cause)
