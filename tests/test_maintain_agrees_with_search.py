"""`memory-plugin maintain` (`MemoryAdmin.archive_decayed`) and the reads must agree on what a decayed fact is:
a note dated years ago that `search` finds is still found after maintenance archived it (archiving takes a
decayed fact out of the prompt's ranking; search, which applies no decay floor, keeps recalling it)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.manager import MemoryManager
from memory_plugin.quality.decay import DecayPolicy


async def test_a_2023_note_search_finds_is_still_found_after_maintain(
    pg_memory: MemoryManager, database_url: str, user_id: UUID
) -> None:
    await pg_memory.remember(
        user_id, "Caroline went to the LGBTQ support group on 7 May 2023", occurred_at=datetime(2023, 5, 7, tzinfo=UTC)
    )
    before = [
        hit.memory.content for hit in await pg_memory.search(user_id, "When did Caroline go to the support group?")
    ]
    assert any("support group" in content for content in before)

    async with await MemoryAdmin.connect(database_url) as admin:
        await admin.archive_decayed(DecayPolicy())
    assert [r.archived_at is not None for r in await pg_memory.list_memory(user_id)] == [True]  # maintain archived it

    after = [
        hit.memory.content for hit in await pg_memory.search(user_id, "When did Caroline go to the support group?")
    ]
    assert after == before
