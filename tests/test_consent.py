"""The memory switch: a paused user gets nothing new stored (writes, notes, extraction), reads go on, every
manager sees the switch (it is in the database), and the REST API and the CLI set it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import httpx
import jwt
import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from typer.testing import CliRunner

from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate, Message
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.cli import app
from memory_plugin.consent import MEMORY_NOTICE, ConsentStore, memory_notice
from memory_plugin.errors import MemoryPausedError
from tests.chat_helpers import word_embedder

SECRET = "test-secret-with-at-least-32-bytes-of-entropy!"


def fact(text: str) -> MemorizedFact:
    return MemorizedFact(content=text, category="preference", confidence=0.9, source="explicit")


async def test_a_paused_user_gets_nothing_new_stored_and_reads_go_on(
    pg_memory: MemoryManager, pg_settings: MemorySettings, user_id: UUID
) -> None:
    await pg_memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere aluminio 7075")]))
    await pg_memory.pause_memory(user_id)

    async with MemoryManager.open(pg_settings) as other_process:  # another manager sees the switch
        assert await other_process.memory_paused(user_id)
        with pytest.raises(MemoryPausedError, match="paused"):
            await other_process.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere latón")]))
    with pytest.raises(MemoryPausedError):
        await pg_memory.remember(user_id, "Trabaja los lunes")
    await pg_memory.add_message(
        "s-paused", Message(role="user", content="Recuerda que prefiero titanio"), user_id=user_id
    )
    run = await pg_memory.extract_if_due("s-paused", user_id, end_of_request=True)
    assert run.stored == []
    assert await pg_memory.remember_from_session("s-paused", user_id) == []
    scheduled = await pg_memory.schedule_extraction("s-paused", user_id, end_of_request=True)
    assert scheduled.job_id is None
    await pg_memory.flush()

    assert [r.content for r in await pg_memory.list_memory(user_id)] == ["Prefiere aluminio 7075"]
    context = await pg_memory.get_memory_context("s-paused", user_id)
    assert "aluminio" in pg_memory.format_memory_for_agent(context), "reads go on while paused"

    await pg_memory.pause_memory(user_id, paused=False)
    assert not await pg_memory.memory_paused(user_id)
    await pg_memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere latón")]))
    assert len(await pg_memory.list_memory(user_id)) == 2


async def test_a_job_queued_before_the_pause_stores_nothing(
    pg_settings: MemorySettings, user_id: UUID, admin_conn: psycopg.Connection[Any]
) -> None:
    settings = pg_settings.model_copy(update={"background_worker": False})
    async with MemoryManager.open(settings) as app_process:
        await app_process.add_message(
            "s-q", Message(role="user", content="Recuerda que prefiero titanio"), user_id=user_id
        )
        scheduled = await app_process.schedule_extraction("s-q", user_id, end_of_request=True)
        assert scheduled.job_id is not None
        await app_process.pause_memory(user_id)
    async with MemoryManager.open(pg_settings.model_copy(update={"background_worker": True})) as worker:
        # This job, not the whole queue (other tests' jobs share the database): a finished job's row is deleted.
        job = "select state, attempts from public.memory_jobs where id = %s"
        for _ in range(300):  # up to 30 s: the worker takes the job and, the user being paused, drops it
            if admin_conn.execute(job, (scheduled.job_id,)).fetchone() is None:
                break
            await asyncio.sleep(0.1)
        assert admin_conn.execute(job, (scheduled.job_id,)).fetchone() is None, "the dropped job was not completed"
        assert await worker.list_memory(user_id) == []


def test_the_notice_is_there_in_english_and_spanish() -> None:
    assert "pause" in memory_notice("en")
    assert "pausa" in memory_notice("es-ES")
    assert memory_notice("fr") == MEMORY_NOTICE["en"]


def test_the_cli_pauses_and_resumes(pg_settings: MemorySettings, database_url: str, user_id: UUID) -> None:
    runner = CliRunner()
    env = {"MEMORY_DATABASE_URL": database_url, "COLUMNS": "200"}
    paused = runner.invoke(app, ["pause", "--user", str(user_id)], env=env)
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.output

    async def state() -> bool:
        store = ConsentStore(database_url)
        try:
            return await store.paused(user_id)
        finally:
            await store.close()

    assert asyncio.run(state())
    assert runner.invoke(app, ["pause", "--user", str(user_id), "--resume"], env=env).exit_code == 0
    assert not asyncio.run(state())


@pytest_asyncio.fixture(loop_scope="session")
async def api_client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    services = ApiServices(
        chats=ChatService(PostgresChatStore(pool), word_embedder()),
        verifier=TokenVerifier(secret=SECRET),
        consent=ConsentStore(pool=pool),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(services)), base_url="http://a") as c:
        yield c
    await pool.close()


def bearer(user: UUID) -> dict[str, str]:
    claims = {"sub": str(user), "role": "authenticated", "aud": "authenticated", "exp": int(time.time() + 600)}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


async def test_the_api_switch_is_the_signed_in_users_own(
    api_client: httpx.AsyncClient, pg_memory: MemoryManager, user_id: UUID
) -> None:
    first = await api_client.get("/api/memory/pause", headers=bearer(user_id))
    assert first.json() == {"paused": False, "notice": MEMORY_NOTICE["en"]}
    put = await api_client.put("/api/memory/pause", json={"paused": True}, headers=bearer(user_id))
    assert put.status_code == 200
    assert await pg_memory.memory_paused(user_id)
    assert (
        await api_client.put("/api/memory/pause", json={"paused": "maybe"}, headers=bearer(user_id))
    ).status_code == 422
    assert (await api_client.put("/api/memory/pause", json={"paused": False})).status_code == 401
    assert await pg_memory.memory_paused(user_id)
