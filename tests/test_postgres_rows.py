"""Rows as `PostgresStore` reads them: jsonb columns (empty or not) come back as the stored values, each row with
its own objects, and a statement without rows (a delete) gives no rows and its count."""

from __future__ import annotations

from uuid import uuid4

from memory_plugin import PostgresStore
from memory_plugin.rows import MemoryItem
from memory_plugin.text import content_hash


def _note(content: str, metadata: dict[str, object]) -> MemoryItem:
    return MemoryItem(
        kind="fact",
        category="fact",
        content=content,
        content_hash=content_hash("fact", "fact", content),
        confidence=1.0,
        source="explicit",
        metadata=metadata,
    )


async def test_jsonb_columns_read_back_as_stored_and_each_row_owns_its_values(database_url: str) -> None:
    store = await PostgresStore.connect(database_url, max_size=1)
    user = uuid4()
    try:
        written = await store.upsert(
            user,
            [
                _note("Prefiere bridas de latón", {}),
                _note("Pide tornillos M8", {}),
                _note("Habla con Ana", {"speaker": "Ana", "tags": ["compras"], "empty": {}}),
            ],
        )
        assert [r.metadata for r in written] == [{}, {}, {"speaker": "Ana", "tags": ["compras"], "empty": {}}]
        records = await store.list_records(user)
        by_content = {r.content: r for r in records}
        first, second = by_content["Prefiere bridas de latón"], by_content["Pide tornillos M8"]
        assert first.metadata == second.metadata == {}
        assert first.attributes == {}
        first.metadata["changed"] = True  # one row's value is its own
        assert second.metadata == {}
        assert by_content["Habla con Ana"].metadata == {"speaker": "Ana", "tags": ["compras"], "empty": {}}
        assert await store.delete(user, first.id)
        assert not await store.delete(user, first.id)  # no row: no rows read, a count of 0
    finally:
        await store.close()
