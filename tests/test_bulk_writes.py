"""Bulk writes: 10,000 items in one `update_memory` or `remember_many` call are written in chunks of at most
`WRITE_CHUNK_ITEMS` items (each one statement, under a real 5 s statement_timeout), reported per item, nothing
journaled; more than a user's write burst is refused up front with a typed error, nothing written."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID, uuid4

import pytest
import pytest_asyncio
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import SecretStr

from bench.write_load import bench_facts
from memory_plugin import MemoryManager, MemorySettings, MemoryUpdate, Note, ResilientStore
from memory_plugin.errors import MemoryLimitError
from memory_plugin.rows import MemoryItem
from memory_plugin.write import pipeline
from memory_plugin.write.pipeline import WRITE_CHUNK_ITEMS

pytestmark = pytest.mark.asyncio(loop_scope="session")

BULK = 10_000


@pytest_asyncio.fixture(loop_scope="session")
async def timed_memory(database_url: str, pg_settings: MemorySettings) -> AsyncIterator[MemoryManager]:
    """A manager whose connections cancel any statement after 5 s, as the app role's do."""
    options = (conninfo_to_dict(database_url).get("options") or "") + " -c statement_timeout=5000"
    url = make_conninfo(database_url, options=options.strip())
    settings = pg_settings.model_copy(update={"database_url": SecretStr(url), "embedding_model": "none"})
    async with MemoryManager.open(settings) as memory:
        yield memory


def _record_chunks(memory: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every statement the write pipeline sends to the store."""
    sizes: list[int] = []
    store = memory._writer.store
    upsert = store.upsert

    async def spy(user_id: UUID, items: Sequence[MemoryItem], *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(items))
        return await upsert(user_id, items, *args, **kwargs)

    monkeypatch.setattr(store, "upsert", spy)
    return sizes


def _pending(memory: MemoryManager) -> int:
    store = memory.store
    return store.pending_writes if isinstance(store, ResilientStore) else 0


@pytest.mark.slow
async def test_update_memory_of_10000_facts_is_written_in_chunks(
    timed_memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = uuid4()
    sizes = _record_chunks(timed_memory, monkeypatch)
    outcome = await timed_memory.update_memory_detailed(MemoryUpdate(user_id=user, new_facts=bench_facts(0, BULK)))
    # Every fact is reported: inserted, or merged into a near-duplicate (the benchmark facts share most words).
    assert outcome.inserted + outcome.near_duplicates == BULK
    assert outcome.inserted > BULK * 0.9
    assert max(sizes) <= WRITE_CHUNK_ITEMS
    assert await timed_memory.store.count_facts(user) == outcome.inserted
    assert _pending(timed_memory) == 0  # applied, not journaled


@pytest.mark.slow
async def test_remember_many_of_10000_notes_reports_each_and_journals_nothing(
    timed_memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = uuid4()
    sizes = _record_chunks(timed_memory, monkeypatch)
    notes = [Note(content=f.content) for f in bench_facts(50_000, BULK)]
    outcome = await timed_memory.remember_many_detailed(user, notes)
    assert [n.index for n in outcome.notes] == list(range(BULK))
    assert {n.status for n in outcome.notes} == {"stored"}
    assert max(sizes) <= WRITE_CHUNK_ITEMS
    assert await timed_memory.store.count_facts(user) == BULK
    assert _pending(timed_memory) == 0


# The real chunk size writes 207 facts (~2.6 s of CPU: slow); chunks of 10 show the same in the quick run.
@pytest.mark.parametrize("chunk", [pytest.param(WRITE_CHUNK_ITEMS, marks=pytest.mark.slow), 10])
async def test_a_chunked_write_retried_with_its_write_id_is_applied_once(
    pg_memory: MemoryManager, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "WRITE_CHUNK_ITEMS", chunk)
    user, write_id = uuid4(), uuid4()
    update = MemoryUpdate(user_id=user, new_facts=bench_facts(0, chunk + 7))
    first = await pg_memory._writer.update(update, write_id=write_id)
    again = await pg_memory._writer.update(update, write_id=write_id)
    # The replay changes nothing: no row reinforced, none added.
    assert {f.id for f in again.stored} == {f.id for f in first.stored}
    assert await pg_memory.store.count_facts(user) == first.inserted
    records = await pg_memory.list_memory(user, limit=2_000)
    assert all(r.relevance_count == 0 for r in records)


@pytest.mark.slow
async def test_more_than_the_write_burst_is_refused_up_front_with_a_typed_error(pg_memory: MemoryManager) -> None:
    user = uuid4()
    burst = pg_memory.settings.write_burst
    notes = [Note(content=f.content) for f in bench_facts(0, burst + 1)]
    with pytest.raises(MemoryLimitError, match="too fast"):
        await pg_memory.remember_many(user, notes)
    assert await pg_memory.store.count_facts(user) == 0
