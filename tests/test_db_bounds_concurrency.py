"""The facts-per-user limit holds exactly under concurrent writers: the database counts in the writing
transaction (a counter row locked until commit), so writes racing past the plugin's own per-process check
cannot overshoot, and the ones refused raise `MemoryLimitError` with nothing of theirs stored."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import psycopg
import pytest

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.errors import MemoryLimitError
from memory_plugin.write.notes import Note


@pytest.mark.asyncio(loop_scope="session")
async def test_twenty_concurrent_writes_of_ten_against_a_limit_of_a_hundred_store_exactly_a_hundred(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    user = uuid4()
    admin_conn.execute(
        "insert into memory_private.memory_limits (name, user_id, value) values ('facts_per_user', %s, 100)", (user,)
    )
    limits = {"max_facts_per_user": 100, "pool_max_size": 20, "embedding_model": "none"}
    settings = pg_settings.model_copy(update=limits)
    async with MemoryManager.open(settings) as memory:

        async def write(batch: int) -> int:
            notes = [Note(content=f"Pedido {batch * 10 + i} de bridas número {batch}-{i}") for i in range(10)]
            try:
                return len(await memory.remember_many(user, notes))
            except MemoryLimitError:
                return 0

        stored = await asyncio.gather(*(write(b) for b in range(20)))
    row = admin_conn.execute(
        "select count(*) from public.user_memory where user_id = %s and kind = 'fact'", (user,)
    ).fetchone()
    assert row == (100,)
    assert sorted(stored) == [0] * 10 + [10] * 10  # each write stored whole or not at all
