"""A search hit's record: read from `memory_search`'s row as the store keeps it, every field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import UUID, uuid4

from memory_plugin import MemoryManager
from memory_plugin.retrieval.search import record_from_json, record_from_json_text


async def test_a_hit_carries_the_stored_record_whole(any_memory: MemoryManager, user_id: UUID) -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    await any_memory.remember(
        user_id,
        "Caroline went to the titanium workshop",
        occurred_at=when,
        session_id="conv/session-1",
        metadata={"dia_id": "D1:3", "speaker": "Caroline"},
    )
    stored = {r.id: r for r in await any_memory.list_memory(user_id)}

    hits = await any_memory.search(user_id, "titanium workshop", limit=5)

    assert hits
    assert all(hit.memory == stored[hit.memory.id] for hit in hits)
    assert hits[0].memory.occurred_at == when
    assert hits[0].memory.metadata["speaker"] == "Caroline"


def test_a_row_as_json_text_reads_as_the_row_and_a_null_collection_as_empty() -> None:
    row = {
        "id": str(uuid4()), "user_id": str(uuid4()), "kind": "fact", "category": "fact", "content": "Caroline: hi",
        "confidence": 0.6, "source": "explicit", "importance": 3, "relevance_count": 0, "source_message_ids": ["m1"],
        "session_id": "s1", "attributes": {}, "content_hash": "h", "created_at": "2023-05-08T13:56:00+00:00",
        "updated_at": "2026-11-27T04:27:29.123456+00:00", "last_reinforced_at": "2023-05-08T13:56:00+00:00",
        "occurred_at": "2023-05-08T13:56:00+00:00", "metadata": {"dia_id": "D1:3"}, "match_words": ["carol"],
        "key_id": None, "not_a_field": 1,
    }  # fmt: skip
    for nulls in (False, True):
        row["metadata"] = None if nulls else {"dia_id": "D1:3"}
        record = record_from_json_text(json.dumps(row))
        assert record == record_from_json(row)
        assert record.metadata == ({} if nulls else {"dia_id": "D1:3"})
        assert record.source_message_ids == ("m1",)
        assert isinstance(record.created_at, datetime)
