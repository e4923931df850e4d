"""Every pool the library opens on the embedded default connects as the application role `memory_plugin_app`,
never as the server's superuser (which only migrates): the long-term store, the job queue, the context store,
the Postgres session store (as `memory_worker`) and `memory-plugin serve`'s pool; `serve` restarts the embedded
server when it dies, as the manager does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from pydantic import SecretStr

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.api import server
from memory_plugin.models import Message
from tests.test_faults import kill_immediately, postmaster_pid

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]


def client_roles(admin_url: str) -> list[tuple[str, str]]:
    """(login role, database) of every client connection to the server but this one."""
    with psycopg.connect(admin_url) as conn:
        rows = conn.execute(
            "select usename::text, datname::text from pg_stat_activity"
            " where backend_type = 'client backend' and pid <> pg_backend_pid()"
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


async def test_every_pool_of_the_manager_connects_as_the_application_role(tmp_path: Path) -> None:
    settings = MemorySettings(data_dir=tmp_path, embedding_model="none", session_backend="postgres")
    user = uuid4()
    async with MemoryManager.open(settings) as memory:
        await memory.add_message("s1", Message(role="user", content="Recuerda que prefiero latón."), user_id=user)
        await memory.get_memory_context("s1", user)  # opens the context store
        await memory.schedule_extraction("s1", user, end_of_request=True)  # uses the job queue
        await memory.flush(10)
        assert memory.database_url is not None
        roles = client_roles(memory.database_url)
    assert roles, "the manager's pools are open"
    assert {role for role, _ in roles} == {"memory_plugin_app"}


async def test_serve_connects_as_the_application_role_and_restarts_its_embedded_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "default_embedder", lambda settings: object())  # chats' embedder is not used here
    settings = MemorySettings(
        data_dir=tmp_path, embedding_model="none", connect_timeout_seconds=2, jwt_secret=SecretStr("s" * 32)
    )
    pgdata = tmp_path / "postgres"
    async with server.open_services(settings) as services:
        store: Any = services.memory
        async with store.pool.connection() as conn:
            row = await (await conn.execute("select current_user::text")).fetchone()
        assert row["current_user"] == "memory_plugin_app"
        first = postmaster_pid(pgdata)
        await asyncio.to_thread(kill_immediately, pgdata)
        deadline = time.monotonic() + 30
        while postmaster_pid(pgdata) in (None, first) and time.monotonic() < deadline:  # noqa: ASYNC110 - a pid file
            await asyncio.sleep(0.2)
        assert postmaster_pid(pgdata) not in (None, first), "serve restarted the embedded server"
