"""The write-scaling benchmark's bulk loader (`bench.write_load.bulk_load`) stores the same facts as `update_memory`
in 200-fact calls: the same rows, with the same near-duplicates merged and reinforced."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from bench.write_load import bench_facts, bulk_load
from memory_plugin import MemoryManager, MemorySettings, MemoryUpdate

AdminConn = psycopg.Connection[tuple[Any, ...]]
FACTS = 2_000


def _rows(conn: AdminConn, user: UUID) -> list[tuple[Any, ...]]:
    """What a user's rows say, without ids and times."""
    return conn.execute(
        "select kind, category, content, confidence, source, importance, relevance_count, content_hash, slot,"
        " match_key, match_guard, match_words, invalid_at is null, archived_at is null"
        " from public.user_memory where user_id = %s order by content_hash",
        (user,),
    ).fetchall()


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
async def test_bulk_load_stores_what_update_memory_stores(pg_settings: MemorySettings, admin_conn: AdminConn) -> None:
    through_api, loaded = uuid4(), uuid4()
    facts = bench_facts(0, FACTS)
    async with MemoryManager.open(pg_settings.model_copy(update={"embedding_model": "none"})) as memory:
        for start in range(0, FACTS, 200):
            await memory.update_memory(MemoryUpdate(user_id=through_api, new_facts=facts[start : start + 200]))
    bulk_load(admin_conn, loaded, facts)
    api_rows, loaded_rows = _rows(admin_conn, through_api), _rows(admin_conn, loaded)
    assert len(api_rows) < FACTS, "some benchmark facts are near-duplicates of others, merged"
    assert loaded_rows == api_rows
