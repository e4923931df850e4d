"""`memory-plugin rotate-key`: every sealed row re-sealed under the active key (batched, resumable, idempotent,
safe beside the application); afterwards the old key can be removed and everything still reads."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from typer.testing import CliRunner

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.cli import app
from memory_plugin.database.rekey import rotate_keys

session_loop = pytest.mark.asyncio(loop_scope="session")

HASH_KEY = base64.b64encode(os.urandom(32)).decode()
SECRETS = ("Toma insulina glargina cada noche", "Su cuñada Filomena vive en Soria", "Usa audífono en el oído izquierdo")


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def keyed(base: MemorySettings, keys: str | None, active: str | None = None) -> MemorySettings:
    values: dict[str, Any] = {"database_url": base.database_url, "data_dir": base.data_dir, "embedding_model": "none"}
    if keys is not None:
        values |= {"encryption_keys": keys, "encryption_active_key": active, "encryption_hash_key": HASH_KEY}
    return MemorySettings(**values)


async def rotate(settings: MemorySettings, **options: Any) -> Any:
    """`rotate_keys` with the settings' ring, on an administrative connection of its own."""
    ring = settings.key_ring()
    assert ring is not None
    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await rotate_keys(conn, ring, settings.sensitive_categories, **options)


def key_ids(conn: psycopg.Connection[Any], users: tuple[UUID, ...]) -> list[str | None]:
    rows = conn.execute("select key_id from public.user_memory where user_id = any(%s) order by id", (list(users),))
    return [r[0] for r in rows.fetchall()]


@session_loop
async def test_rotation_reseals_every_row_and_the_old_key_can_be_removed(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any]
) -> None:
    users = (uuid4(), uuid4())
    old_id, new_id = f"o{uuid4().hex[:8]}", f"n{uuid4().hex[:8]}"
    old, new = f"{old_id}:{new_key()}", f"{new_id}:{new_key()}"
    async with MemoryManager.open(keyed(pg_settings, old)) as memory:
        for user in users:
            for secret in SECRETS:
                await memory.remember(user, secret, sensitive=True)
            await memory.remember(user, "Trabaja con aluminio 7075")
    assert sorted(key_ids(admin_conn, users), key=str) == [None, None] + [old_id] * 6

    both = keyed(pg_settings, f"{new},{old}", active=new_id)
    report = await rotate(both, batch_size=2)
    assert report.resealed >= 6  # ours (other tests' rows under other keys are reported unreadable)
    assert sorted(key_ids(admin_conn, users), key=str) == [None, None] + [new_id] * 6
    again = await rotate(both)
    assert (again.resealed, again.sealed) == (0, 0)  # idempotent: nothing of ours (or anyone's) left to do

    async with MemoryManager.open(keyed(pg_settings, new)) as memory:  # the old key removed
        for user in users:
            assert {r.content for r in await memory.list_memory(user)} == {*SECRETS, "Trabaja con aluminio 7075"}


@session_loop
async def test_rotation_seals_plain_rows_of_sensitive_categories_stored_before_keys(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any]
) -> None:
    user = uuid4()
    async with MemoryManager.open(keyed(pg_settings, None)) as memory:
        await memory.remember(user, "Usa audífono en el oído izquierdo", category="health_note")
    assert key_ids(admin_conn, (user,)) == [None]
    key_id = f"k{uuid4().hex[:8]}"
    settings = keyed(pg_settings, f"{key_id}:{new_key()}")
    await rotate(settings)
    row = admin_conn.execute(
        "select m.key_id, m.match_key, m.content_hash, (select count(*) from public.memory_search_docs d"
        " where d.memory_id = m.id) from public.user_memory m where m.user_id = %s",
        (user,),
    ).fetchone()
    assert row is not None
    assert row[0] == key_id
    assert row[1] is None
    assert row[2].startswith("hmac:")
    assert row[3] == 0  # its search row (text, tsvector, postings) is gone
    async with MemoryManager.open(settings) as memory:
        assert [r.content for r in await memory.list_memory(user)] == ["Usa audífono en el oído izquierdo"]


@session_loop
async def test_rotation_beside_the_application_loses_nothing(pg_settings: MemorySettings) -> None:
    user = uuid4()
    old_id, new_id = f"o{uuid4().hex[:8]}", f"n{uuid4().hex[:8]}"
    old, new = f"{old_id}:{new_key()}", f"{new_id}:{new_key()}"
    async with MemoryManager.open(keyed(pg_settings, old)) as memory:
        for n in range(20):
            await memory.remember(user, f"Nota privada número {n}", sensitive=True)
    both = keyed(pg_settings, f"{new},{old}", active=new_id)
    async with MemoryManager.open(both) as memory:

        async def write() -> None:
            for n in range(20):
                await memory.remember(user, f"Nota privada número {n}", sensitive=True)  # reinforce during rotation
                await memory.remember(user, f"Nota nueva {n}", sensitive=True)

        await asyncio.gather(write(), rotate(both, batch_size=3))
        await rotate(both)
    async with MemoryManager.open(keyed(pg_settings, new)) as memory:
        records = await memory.list_memory(user)
        assert len(records) == 40
        assert {r.key_id for r in records} == {new_id}
        assert all(r.relevance_count == 1 for r in records if "privada" in r.content)


def test_the_command_reports_counts_and_refuses_without_keys(database_url: str) -> None:
    runner = CliRunner()
    env = {"MEMORY_DATABASE_URL": database_url, "COLUMNS": "200"}
    refused = runner.invoke(app, ["rotate-key"], env=env)
    assert refused.exit_code == 1
    assert "no encryption keys" in refused.output
    key = f"k{uuid4().hex[:8]}"
    keys = {"MEMORY_ENCRYPTION_KEYS": f"{key}:{new_key()}", "MEMORY_ENCRYPTION_HASH_KEY": HASH_KEY}
    result = runner.invoke(app, ["rotate-key", "--no-seal-plain"], env={**env, **keys})
    # Rows other tests sealed under keys not given here are reported as unreadable (exit 1), never changed.
    assert "re-sealed" in result.output
    assert "not under the active key" in result.output
