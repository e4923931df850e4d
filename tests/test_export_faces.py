"""Export and import through the command line and the REST API: `memory-plugin export --user U > u.json`,
`memory-plugin import u.json`, and `GET /api/memory/export` for the signed-in user only."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import jsonschema_rs
import jwt
import psycopg
import pytest_asyncio
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from typer.testing import CliRunner

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.cli import app
from memory_plugin.export import PoolExporter
from memory_plugin.store.postgres import PostgresStore
from tests.chat_helpers import word_embedder
from tests.export_helpers import fill_user

SECRET = "test-secret-with-at-least-32-bytes-of-entropy!"
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "memory_plugin/export/schema/v1.json").read_text())


async def export_text(memory: MemoryManager, user: UUID) -> str:
    return "".join([chunk async for chunk in memory.export_user(user)])


def filled_export(settings: MemorySettings, admin_conn: psycopg.Connection[Any], user: UUID) -> str:
    """Fill the user and return the manager's export of them (the CLI's tests run outside an event loop)."""

    async def fill() -> str:
        async with MemoryManager.open(settings) as memory:
            await fill_user(memory, admin_conn, user)
            return await export_text(memory, user)

    return asyncio.run(fill())


def test_cli_export_erase_import_round_trip(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any], database_url: str, user_id: UUID, tmp_path: Path
) -> None:
    expected = filled_export(pg_settings, admin_conn, user_id)
    runner = CliRunner()
    env = {"MEMORY_DATABASE_URL": database_url, "COLUMNS": "200"}
    exported = runner.invoke(app, ["export", "--user", str(user_id)], env=env)
    assert exported.exit_code == 0, exported.output
    assert exported.stdout == expected, "stdout is the document alone"
    jsonschema_rs.validate(SCHEMA, json.loads(exported.stdout))
    path = tmp_path / "u.json"
    path.write_text(exported.stdout, encoding="utf-8")

    refused = runner.invoke(app, ["import", str(path)], env=env)
    assert refused.exit_code == 1
    assert "already holds memory" in " ".join(refused.output.split())

    assert runner.invoke(app, ["erase", "--user", str(user_id), "--yes"], env=env).exit_code == 0
    imported = runner.invoke(app, ["import", str(path)], env=env)
    assert imported.exit_code == 0, imported.output
    assert f"of user {user_id}" in imported.output
    to_file = runner.invoke(app, ["export", "--user", str(user_id), "--output", str(tmp_path / "again.json")], env=env)
    assert to_file.exit_code == 0, to_file.output
    assert (tmp_path / "again.json").read_text(encoding="utf-8") == exported.stdout


def test_cli_import_of_a_bad_file_is_one_line_and_writes_nothing(
    admin_conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    env = {"MEMORY_DATABASE_URL": database_url, "COLUMNS": "200"}
    user = uuid4()
    path = tmp_path / "v9.json"
    path.write_text(json.dumps({"format": "memory-plugin.user-export", "version": 9, "user_id": str(user)}))
    result = runner.invoke(app, ["import", str(path)], env=env)
    assert result.exit_code == 1
    assert "version 9 cannot be read" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    missing = runner.invoke(app, ["import", str(tmp_path / "nope.json")], env=env)
    assert missing.exit_code == 1
    assert "cannot read" in missing.output
    assert admin_conn.execute("select count(*) from public.user_memory where user_id = %s", (user,)).fetchone() == (0,)


@pytest_asyncio.fixture(loop_scope="session")
async def api_client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    services = ApiServices(
        chats=ChatService(PostgresChatStore(pool), word_embedder()),
        verifier=TokenVerifier(secret=SECRET),
        memory=PostgresStore(pool),
        exporter=PoolExporter(pool),
    )
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client
    await pool.close()


def bearer(user: UUID) -> dict[str, str]:
    claims = {"sub": str(user), "role": "authenticated", "aud": "authenticated", "exp": int(time.time() + 600)}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


async def test_api_export_is_the_signed_in_users_own(
    api_client: httpx.AsyncClient, pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], user_id: UUID
) -> None:
    await fill_user(pg_memory, admin_conn, user_id)
    other = uuid4()
    await pg_memory.remember(other, "Trabaja con latón")

    response = await api_client.get("/api/memory/export", headers=bearer(user_id))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert "attachment" in response.headers["content-disposition"]
    assert response.text == await export_text(pg_memory, user_id)
    assert "latón" not in response.text

    theirs = (await api_client.get("/api/memory/export", headers=bearer(other))).json()
    assert theirs["user_id"] == str(other)
    assert [m["content"] for m in theirs["sections"]["memories"]] == ["Trabaja con latón"]

    anonymous = await api_client.get("/api/memory/export")
    assert anonymous.status_code == 401
    assert "sections" not in anonymous.text
