"""Verbatim notes on the write path: one refused note never fails a batch, clinical spans are redacted and the
rest kept, long messages are accepted and embedded whole, and a secret never lands anywhere it could be read."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from pydantic_ai import Embedder
from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.base import EmbedInputType

from memory_plugin import (
    InMemoryStore,
    InvalidMemoryInputError,
    MemorizedFact,
    MemoryManager,
    MemorySettings,
    MemoryUpdate,
    Note,
    PostgresStore,
    ResilientStore,
)
from memory_plugin.embeddings import MemoryEmbedder
from memory_plugin.errors import MemoryPluginError
from memory_plugin.outage import WriteJournal
from memory_plugin.rows import CONTENT_MAX_CHARS
from memory_plugin.write.notes import note_item
from memory_plugin.write.pipeline import EMBEDDING_WINDOW_CHARS, embedding_windows, mean_direction

AdminConn = psycopg.Connection[tuple[Any, ...]]
CARD = "4111 1111 1111 1111"


def everything_stored(admin_conn: AdminConn, user: UUID) -> str:
    """Every text of the user in `user_memory` (content, metadata) and the search table (text, speaker)."""
    memory = admin_conn.execute(
        "select string_agg(content || ' ' || metadata::text, ' | ') from public.user_memory where user_id = %s",
        (user,),
    ).fetchone()
    search = admin_conn.execute(
        "select string_agg(content || ' ' || coalesce(speaker, ''), ' | ') from public.memory_search_docs"
        " where user_id = %s",
        (user,),
    ).fetchone()
    return f"{memory[0] if memory else ''} {search[0] if search else ''}"


async def test_one_refused_note_among_fifty_is_reported_and_the_others_stored(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    notes = [Note(content=f"Turn {i}: we talked about the trip to Lisbon, day {i}") for i in range(50)]
    notes[17] = Note(content=CARD)  # only a card number: nothing meaningful is left
    before = pg_memory.stats.notes_refused
    outcome = await pg_memory.remember_many_detailed(user_id, notes)
    assert [n.index for n in outcome.refused] == [17]
    assert outcome.refused[0].reason is not None
    assert outcome.refused[0].redacted == ("payment_card",)
    assert outcome.count("stored") == 49
    assert len(await pg_memory.list_memory(user_id)) == 49
    assert pg_memory.stats.notes_refused == before + 1
    # remember_many returns what was stored; a single refused note still raises.
    again = await pg_memory.remember_many(user_id, notes[:3])
    assert len(again) == 3
    with pytest.raises(InvalidMemoryInputError, match="nothing is left"):
        await pg_memory.remember(user_id, CARD)


async def test_a_repeated_note_is_reported_as_merged(ram_memory: MemoryManager, user_id: UUID) -> None:
    await ram_memory.remember(user_id, "We met at the harbour")
    outcome = await ram_memory.remember_many_detailed(
        user_id, [Note(content="We met at the harbour"), Note(content="New note"), Note(content="New note")]
    )
    assert [n.status for n in outcome.notes] == ["merged", "stored", "merged"]
    assert outcome.notes[1].record == outcome.notes[2].record


async def test_the_speakers_own_clinical_detail_is_redacted_and_the_rest_kept(
    pg_memory: MemoryManager, user_id: UUID
) -> None:
    outcome = await pg_memory.remember_many_detailed(
        user_id,
        [
            Note(content="Turns out I'm covid positive, so I cancelled the trip to Lisbon"),
            Note(content="Since covid, prices went up a lot"),  # a period, not the speaker's health
        ],
    )
    first, second = outcome.notes
    assert first.status == "stored"
    assert first.record is not None
    assert "covid positive" not in first.record.content
    assert "[health detail]" in first.record.content
    assert "cancelled the trip to Lisbon" in first.record.content
    assert any(kind.startswith("health:") for kind in first.redacted)
    assert second.record is not None
    assert second.record.content == "Since covid, prices went up a lot"
    assert second.redacted == ()
    hits = await pg_memory.search(user_id, "Lisbon trip cancelled")
    assert hits[0].memory.id == first.record.id


async def test_long_messages_are_notes_and_their_last_words_are_found(pg_memory: MemoryManager, user_id: UUID) -> None:
    filler = " ".join(f"We spent the afternoon on item {i} of the list." for i in range(60))
    long_text = filler + " Finally we decided to book violin lessons for Sara."
    assert len(long_text) > 2_000
    record = await pg_memory.remember(user_id, long_text)
    assert record.content == long_text
    hits = await pg_memory.search(user_id, "violin lessons")
    assert hits[0].memory.id == record.id
    with pytest.raises(InvalidMemoryInputError, match="limit"):
        await pg_memory.remember(user_id, "x " * (pg_memory.settings.max_note_chars // 2 + 1))
    # Extracted facts keep the short limit.
    with pytest.raises(InvalidMemoryInputError, match="limit"):
        await pg_memory.update_memory(
            MemoryUpdate(
                user_id=user_id,
                new_facts=[MemorizedFact(content="y " * 400, category="fact", confidence=0.9, source="explicit")],
            )
        )


class OneHotWindows(EmbeddingModel):
    """Embeds a text as the unit vector of its length bucket, so windows of one text differ."""

    @property
    def model_name(self) -> str:
        return "one-hot"

    @property
    def system(self) -> str:
        return "test"

    async def embed(
        self, inputs: str | list[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        texts = [inputs] if isinstance(inputs, str) else inputs
        vectors = [[1.0 if d == len(t) % 8 else 0.0 for d in range(384)] for t in texts]
        return EmbeddingResult(
            embeddings=vectors, inputs=texts, input_type=input_type, model_name="one-hot", provider_name="test"
        )


async def test_a_long_note_is_embedded_as_the_mean_of_its_windows(user_id: UUID) -> None:
    text = " ".join(f"palabra{i}" for i in range(400))
    windows = embedding_windows(text)
    assert len(windows) > 1
    assert all(len(w) <= EMBEDDING_WINDOW_CHARS for w in windows)
    assert windows[0].startswith("palabra0 ")
    assert windows[-1].endswith("palabra399")
    embedder = MemoryEmbedder(Embedder(OneHotWindows()), name="one-hot")
    settings = MemorySettings(embedding_model="none")
    expected = mean_direction([tuple(1.0 if d == len(w) % 8 else 0.0 for d in range(384)) for w in windows])
    async with MemoryManager.open(settings, store=InMemoryStore(), embedder=embedder) as memory:
        [item] = await memory._writer.embed_items([note_item(Note(content=text))])
    assert item.embedding == pytest.approx(expected)
    assert sum(1 for x in item.embedding or () if x > 0) > 1  # a mix of windows, not the first one alone


async def test_a_secret_never_lands_in_content_metadata_speaker_search_table_journal_or_logs(
    pg_memory: MemoryManager,
    user_id: UUID,
    admin_conn: AdminConn,
    database_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="memory_plugin"):
        await pg_memory.remember(
            user_id,
            f"Pay with my card {CARD} for the Lisbon order",
            metadata={"speaker": f"Juan {CARD}", "notes": {"iban": "ES91 2100 0418 4502 0005 1332"}},
        )
        # An outage: the write goes to the journal, which must not hold the secret either.
        primary = await PostgresStore.connect(database_url)
        journal = WriteJournal(tmp_path / "journal" / "writes.jsonl")
        store = ResilientStore(primary, journal, background=False)
        async with MemoryManager.open(MemorySettings(data_dir=tmp_path), store=store) as offline:
            await primary.pool.close()
            await offline.remember(uuid4(), f"My other card is {CARD} and my pwd: hunter2hunter2")
            assert len(journal) == 1
    stored = everything_stored(admin_conn, user_id)
    assert "Lisbon" in stored
    for secret in ("4111", "ES91", "2100 0418"):
        assert secret not in stored
        assert secret not in journal.path.read_text()
        assert secret not in caplog.text
    assert "hunter2" not in journal.path.read_text()


def test_the_content_limit_matches_the_schema_and_settings_beyond_it_fail_at_start() -> None:
    schema = (Path(__file__).parents[1] / "supabase" / "schemas" / "10_user_memory.sql").read_text()
    assert f"check (char_length(content) between 1 and {CONTENT_MAX_CHARS})" in schema
    with pytest.raises(MemoryPluginError, match="MEMORY_MAX_NOTE_CHARS"):
        MemoryManager(MemorySettings(max_note_chars=CONTENT_MAX_CHARS + 1, embedding_model="none"), InMemoryStore())
