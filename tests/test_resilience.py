"""`ResilientStore`: what the memory does while the database is unreachable (GitHub issue #3, items 6 and 7).

The primary is the real PostgresStore on the session's embedded PostgreSQL, behind `Outage`, which fails
calls exactly as an unreachable database does (`StoreUnavailableError`) when the test says so, or commits a
write and then loses its acknowledgement. Stopping a real server mid-stream is in tests/test_faults.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import random
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
import pytest_asyncio
from typer.testing import CliRunner

from memory_plugin import (
    BackendStatus,
    MemorizedFact,
    MemoryContext,
    MemoryManager,
    MemorySettings,
    MemoryUpdate,
    Message,
    PostgresStore,
    ResilientStore,
    StoreUnavailableError,
    UserPreferences,
)
from memory_plugin.cli import app
from memory_plugin.outage import WriteJournal
from memory_plugin.outage.journal import database_identity, journal_path
from memory_plugin.outage.resilient import backoff_delay
from memory_plugin.quality.rules import WriteRules
from memory_plugin.retrieval import ScoredMemory, SearchQuery
from memory_plugin.rows import MemoryItem, MemoryKind, MemoryRecord
from memory_plugin.store import ContextQuery
from memory_plugin.store.base import DEFAULT_WRITE_RULES
from memory_plugin.write.items import items_from_update

AdminConn = psycopg.Connection[tuple[Any, ...]]


def fact(content: str, *, confidence: float = 0.8, category: str = "preference") -> MemorizedFact:
    return MemorizedFact(content=content, category=category, confidence=confidence, source="explicit")  # type: ignore[arg-type]


def rows(admin_conn: AdminConn, user: UUID) -> dict[str, tuple[Any, ...]]:
    """content -> (kind, category, relevance_count, confidence) of the user's rows, read as superuser."""
    found = admin_conn.execute(
        "select content, kind, category, relevance_count, round(confidence::numeric, 2)::float8 from public.user_memory"
        " where user_id = %s",
        (user,),
    ).fetchall()
    return {r[0]: tuple(r[1:]) for r in found}


class Outage:
    """A LongTermStore in front of a real PostgresStore that fails like an unreachable database on demand."""

    def __init__(self, inner: PostgresStore) -> None:
        self.inner = inner
        self.down = False
        self.lose_ack_after_commit = False
        self.upserts = 0

    @property
    def backend_name(self) -> str:
        return "postgres"

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailableError("Postgres is unreachable: injected outage")

    async def upsert(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        rules: WriteRules = DEFAULT_WRITE_RULES,
        *,
        write_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        self._check()
        self.upserts += 1
        records = await self.inner.upsert(user_id, items, rules, write_id=write_id)
        if self.lose_ack_after_commit:
            raise StoreUnavailableError("Postgres is unreachable: connection lost after the commit (injected)")
        return records

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        self._check()
        return await self.inner.context(user_id, query)

    async def search(self, user_id: UUID, query: SearchQuery) -> list[ScoredMemory]:
        self._check()
        return await self.inner.search(user_id, query)

    async def list_records(
        self, user_id: UUID, *, kind: MemoryKind | None = None, limit: int = 1000
    ) -> list[MemoryRecord]:
        self._check()
        return await self.inner.list_records(user_id, kind=kind, limit=limit)

    async def search_text(self, user_id: UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        self._check()
        return await self.inner.search_text(user_id, text, limit=limit)

    async def fact_history(
        self, user_id: UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemoryRecord]:
        self._check()
        return await self.inner.fact_history(user_id, at=at, include_invalid=include_invalid, limit=limit)

    async def count_facts(self, user_id: UUID) -> int:
        self._check()
        return await self.inner.count_facts(user_id)

    async def delete(self, user_id: UUID, record_id: UUID) -> bool:
        self._check()
        return await self.inner.delete(user_id, record_id)

    async def ping(self) -> bool:
        return not self.down and await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()


@pytest_asyncio.fixture(loop_scope="session")
async def outage(database_url: str) -> AsyncIterator[Outage]:
    store = Outage(await PostgresStore.connect(database_url, max_size=4))
    yield store
    await store.close()


def resilient(outage: Outage, tmp_path: Path, **kw: Any) -> ResilientStore:
    """A ResilientStore replaying only when told (`background=False`), unless the test asks otherwise."""
    kw.setdefault("background", False)
    kw.setdefault("retry_base_seconds", 0.01)
    kw.setdefault("retry_max_seconds", 0.05)
    kw.setdefault("rng", random.Random(7))
    return ResilientStore(outage, WriteJournal(tmp_path / "journal" / "writes.jsonl"), **kw)


@pytest_asyncio.fixture(loop_scope="session")
async def memory(outage: Outage, tmp_path: Path) -> AsyncIterator[MemoryManager]:
    """A manager on ResilientStore(Outage(real Postgres))."""
    store = resilient(outage, tmp_path)
    async with MemoryManager.open(MemorySettings(data_dir=tmp_path), store=store) as manager:
        yield manager


def journal_of(memory: MemoryManager) -> WriteJournal:
    assert isinstance(memory.store, ResilientStore)
    return memory.store.journal


async def status(memory: MemoryManager) -> BackendStatus:
    """The store's part of the status (the job queue's is tested in test_background.py)."""
    return dataclasses.replace(await memory.backend_status(), queue=None)


# --- reads ---------------------------------------------------------------------------------------------------------


async def test_reads_fall_back_to_the_last_context_read_and_the_block_says_so(
    memory: MemoryManager, outage: Outage, user_id: UUID
) -> None:
    await memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            new_facts=[fact("Prefiere titanio grado 5"), fact("Necesita certificado 3.1", category="requirement")],
        )
    )
    await memory.add_message("s1", Message(role="user", content="Necesito 20 bridas"), user_id=user_id)
    fresh = await memory.get_memory_context("s1", user_id)
    assert fresh.long_term_available
    assert fresh.long_term_cached_at is None
    fresh_block = memory.format_memory_for_agent(fresh)
    assert "unavailable" not in fresh_block

    outage.down = True
    cached = await memory.get_memory_context("s1", user_id)
    assert cached.long_term_available is False
    assert cached.long_term_cached_at is not None
    assert cached.long_term == fresh.long_term  # the last copy read, not an empty memory
    assert [m.content for m in cached.short_term.messages] == ["Necesito 20 bridas"]
    block = memory.format_memory_for_agent(cached)
    assert "Prefiere titanio grado 5" in block
    stamp = cached.long_term_cached_at.strftime("%Y-%m-%d %H:%M UTC")
    assert f"the items above are a saved copy from {stamp} and may be out of date" in block
    assert block == memory.format_memory_for_agent(MemoryContext.model_validate(cached.model_dump()))  # pure

    # A user never read before: nothing cached. The block must not read as "nothing is known".
    stranger = uuid4()
    empty = await memory.get_memory_context("s-stranger", stranger)
    assert empty.long_term_available is False
    assert empty.long_term_cached_at is None
    assert empty.long_term.is_empty()
    assert "Long-term memory is temporarily unavailable; do not assume the user is new." in (
        memory.format_memory_for_agent(empty)
    )
    assert memory.stats.store_failures == 2

    st = await status(memory)
    assert (st.backend, st.postgres_reachable) == ("fallback", False)
    assert (st.fallback_reads, st.cache_entries) == (2, 1)

    # Reads come back fresh as soon as the database does.
    outage.down = False
    again = await memory.get_memory_context("s1", user_id)
    assert again.long_term_available
    assert again.long_term_cached_at is None


@pytest.mark.slow
async def test_an_outage_after_a_context_with_a_query_serves_the_facts_it_showed(
    memory: MemoryManager, outage: Outage, user_id: UUID
) -> None:
    await memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            new_facts=[
                fact("Prefiere titanio grado 5"),
                fact("Necesita certificado 3.1", category="requirement"),
                fact("No sugerir acero 316", category="rejection"),
            ],
        )
    )
    await memory.remember(user_id, "Su perro se llama Luna")
    asked = await memory.get_memory_context("s1", user_id, query="¿Cómo se llama su perro?")
    shown = [f.content for f in asked.long_term.facts]
    assert shown[0] == "Su perro se llama Luna"
    assert "No sugerir acero 316" in shown

    outage.down = True
    cached = await memory.get_memory_context("s1", user_id)
    # The read beside the search skipped ranking facts; the saved copy holds the facts that were shown.
    assert cached.long_term_available is False
    assert sorted(f.content for f in cached.long_term.facts) == sorted(shown)
    again = await memory.get_memory_context("s1", user_id, query="¿Cómo se llama su perro?")
    assert again.long_term.facts[0].content == "Su perro se llama Luna"  # ranked in Python


async def test_a_forgotten_item_never_comes_back_from_the_cache(
    memory: MemoryManager, outage: Outage, user_id: UUID
) -> None:
    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere latón"), fact("Odia el PVC")]))
    ctx = await memory.get_memory_context("s", user_id)
    doomed = next(f for f in ctx.long_term.facts if f.content == "Odia el PVC")
    outage.down = True
    with pytest.raises(StoreUnavailableError):  # deletes are not journaled: the caller learns it failed
        await memory.forget(user_id, doomed.id)
    cached = await memory.get_memory_context("s", user_id)
    assert [f.content for f in cached.long_term.facts] == ["Prefiere latón"]


# --- writes --------------------------------------------------------------------------------------------------------


async def test_writes_are_journaled_fsynced_and_acknowledged(
    memory: MemoryManager, outage: Outage, user_id: UUID, admin_conn: AdminConn, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    outage.down = True
    stored = await memory.update_memory(
        MemoryUpdate(user_id=user_id, session_id="s9", new_facts=[fact("Prefiere aluminio 7075")])
    )
    # Acknowledged: the caller gets the fact back (provisional: not yet in the database).
    assert [(f.content, f.relevance_count) for f in stored] == [("Prefiere aluminio 7075", 0)]
    journal = journal_of(memory)
    assert str(journal.path) in synced  # fsynced before update_memory returned
    assert rows(admin_conn, user_id) == {}

    await memory.update_memory(MemoryUpdate(user_id=user_id, preferences=UserPreferences(industry="naval")))
    lines = journal.path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert journal.path.read_bytes().endswith(b"\n")
    first, second = (json.loads(line) for line in lines)
    assert first["user_id"] == second["user_id"] == str(user_id)
    assert UUID(first["write_id"]) != UUID(second["write_id"])
    assert [i["content"] for i in first["items"]] == ["Prefiere aluminio 7075"]
    assert first["items"][0]["session_id"] == "s9"
    assert [(i["category"], i["content"]) for i in second["items"]] == [("industry", "naval")]
    assert oct(journal.path.stat().st_mode & 0o777) == "0o600"

    st = await status(memory)
    assert (st.journal_length, st.journaled_writes, st.backend) == (2, 2, "fallback")
    assert st.journal_path == journal.path


async def test_replay_is_in_order_and_idempotent(
    memory: MemoryManager, outage: Outage, user_id: UUID, admin_conn: AdminConn
) -> None:
    store = memory.store
    assert isinstance(store, ResilientStore)
    outage.down = True
    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere fresado CNC")]))
    # Order matters: a single-valued preference keeps the last value written, and starts over when it changes.
    await memory.update_memory(MemoryUpdate(user_id=user_id, preferences=UserPreferences(industry="naval")))
    await memory.update_memory(MemoryUpdate(user_id=user_id, preferences=UserPreferences(industry="aeroespacial")))
    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere fresado CNC")]))
    saved = store.journal.path.read_bytes()
    assert await store.replay() == 0  # still down: nothing confirmed, nothing removed
    assert len(store.journal) == 4

    outage.down = False
    assert await store.replay() == 4
    expected = {
        "Prefiere fresado CNC": ("fact", "preference", 1, 0.9),  # stated twice: reinforced once (+0.1)
        "aeroespacial": ("preference", "industry", 0, 0.9),  # the later value, not "naval"
    }
    assert rows(admin_conn, user_id) == expected
    assert len(store.journal) == 0

    # The same journal again (a crash after the commits, before the journal was cleared): applied once.
    store.journal.path.write_bytes(saved)
    assert await store.replay() == 4  # confirmed by the database...
    assert rows(admin_conn, user_id) == expected  # ...and changed nothing
    applied = admin_conn.execute(
        "select count(*) from memory_private.memory_applied_writes where user_id = %s", (user_id,)
    ).fetchone()
    assert applied == (4,)
    st = await status(memory)
    assert (st.journal_length, st.replayed_writes, st.backend) == (0, 8, "postgres")


async def test_new_writes_of_a_user_queue_behind_the_users_journaled_writes(
    memory: MemoryManager, outage: Outage, user_id: UUID, admin_conn: AdminConn
) -> None:
    store = memory.store
    assert isinstance(store, ResilientStore)
    other = uuid4()
    outage.down = True
    await memory.update_memory(MemoryUpdate(user_id=user_id, preferences=UserPreferences(industry="naval")))
    outage.down = False
    # The database is back, but this user's earlier write is not applied yet: the new one must not overtake it.
    await memory.update_memory(MemoryUpdate(user_id=user_id, preferences=UserPreferences(industry="aeroespacial")))
    assert rows(admin_conn, user_id) == {}
    assert len(store.journal) == 2
    # Another user has nothing pending: straight to the database.
    await memory.update_memory(MemoryUpdate(user_id=other, new_facts=[fact("Prefiere bronce")]))
    assert list(rows(admin_conn, other)) == ["Prefiere bronce"]

    assert await store.replay() == 2
    assert rows(admin_conn, user_id) == {"aeroespacial": ("preference", "industry", 0, 0.9)}
    # Nothing pending any more: direct writes again.
    await memory.update_memory(MemoryUpdate(user_id=user_id, preferences=UserPreferences(industry="naval")))
    assert len(store.journal) == 0
    assert rows(admin_conn, user_id) == {"naval": ("preference", "industry", 0, 0.9)}


async def test_a_write_whose_acknowledgement_was_lost_after_the_commit_is_applied_once(
    memory: MemoryManager, outage: Outage, user_id: UUID, admin_conn: AdminConn
) -> None:
    store = memory.store
    assert isinstance(store, ResilientStore)
    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere acero inoxidable")]))
    outage.lose_ack_after_commit = True
    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere acero inoxidable")]))
    outage.lose_ack_after_commit = False
    assert rows(admin_conn, user_id)["Prefiere acero inoxidable"][2] == 1  # the database did apply it
    (entry,) = store.journal.entries()  # and, unaware, the store journaled it with the same write_id

    assert await store.replay() == 1
    assert rows(admin_conn, user_id)["Prefiere acero inoxidable"][2] == 1  # not 2
    assert admin_conn.execute(
        "select item_count from memory_private.memory_applied_writes where write_id = %s", (entry.write_id,)
    ).fetchall() == [(1,)]


async def test_require_pg_memory_raises_instead_of_falling_back(
    outage: Outage, tmp_path: Path, user_id: UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("REQUIRE_PG_MEMORY", "MEMORY_REQUIRE_PG_MEMORY"):
        with monkeypatch.context() as env:
            env.setenv(variable, "true")
            assert MemorySettings().require_pg_memory is True
    assert MemorySettings().require_pg_memory is False

    store = resilient(outage, tmp_path, require_primary=True)
    settings = MemorySettings(data_dir=tmp_path, require_pg_memory=True)
    manager = await MemoryManager.create(settings, store=store)
    try:
        await manager.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere cobre")]))
        await manager.get_memory_context("s", user_id)  # fills the cache, which must not be used
        outage.down = True
        with pytest.raises(StoreUnavailableError, match="injected outage"):
            await manager.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere latón")]))
        with pytest.raises(StoreUnavailableError, match="injected outage"):
            await manager.get_memory_context("s", user_id)
        assert not store.journal.path.exists()
        st = await manager.backend_status()
        assert st.require_pg_memory is True
        assert (st.journaled_writes, st.fallback_reads, st.journal_length) == (0, 0, 0)
    finally:
        outage.down = False
        await manager.close()


# --- throttled logging and status --------------------------------------------------------------------------------


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "memory_plugin" and r.levelno == logging.WARNING]


async def test_connection_errors_are_logged_once_per_interval_and_all_counted(
    outage: Outage, tmp_path: Path, user_id: UUID, caplog: pytest.LogCaptureFixture, clock: Any
) -> None:
    store = resilient(outage, tmp_path, clock=clock, log_interval_seconds=60)
    await store.start()
    outage.down = True
    query = ContextQuery()
    with caplog.at_level(logging.DEBUG, logger="memory_plugin"):
        for _ in range(5):
            await store.read_context(user_id, query)
            clock.advance(10)  # 40 s in all: within the interval
        warnings = warnings_in(caplog)
        assert len(warnings) == 1
        assert "unreachable while reading the context: Postgres is unreachable: injected outage" in warnings[0]
        clock.advance(21)
        await store.read_context(user_id, query)
        warnings = warnings_in(caplog)
        assert len(warnings) == 2
        assert "(4 more errors since the last warning)" in warnings[1]
    assert sum(r.levelno == logging.DEBUG and "unreachable" in r.getMessage() for r in caplog.records) == 4
    st = await store.status()
    assert st.connection_errors == 6
    assert st.last_error == "reading the context: Postgres is unreachable: injected outage"
    assert st.last_error_at is not None
    await store.close()


async def test_backend_status_follows_an_outage_and_the_recovery(
    memory: MemoryManager, outage: Outage, user_id: UUID
) -> None:
    st = await status(memory)
    assert st == BackendStatus(
        backend="postgres",
        primary="postgres",
        postgres_reachable=True,
        journal_length=0,
        journal_path=journal_of(memory).path,
        last_error=None,
        last_error_at=None,
        connection_errors=0,
        fallback_reads=0,
        journaled_writes=0,
        replayed_writes=0,
        replay_failures=0,
        rejected_writes=0,
        cache_entries=0,
        require_pg_memory=False,
    )
    await memory.get_memory_context("s", user_id)
    outage.down = True
    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere titanio")]))
    await memory.get_memory_context("s", user_id)
    store = memory.store
    assert isinstance(store, ResilientStore)
    await store.replay()  # fails: one replay failure, the entry stays
    st = await status(memory)
    assert (st.backend, st.postgres_reachable, st.journal_length) == ("fallback", False, 1)
    assert (st.journaled_writes, st.fallback_reads, st.cache_entries) == (1, 1, 1)
    assert (st.replayed_writes, st.replay_failures, st.connection_errors) == (0, 1, 3)
    assert st.last_error is not None
    assert st.last_error.startswith("replaying the journal")

    outage.down = False
    await store.replay()
    st = await status(memory)
    assert (st.backend, st.postgres_reachable, st.journal_length, st.replayed_writes) == ("postgres", True, 0, 1)
    assert st.last_error is not None  # the last error stays visible after the recovery


async def test_the_background_replayer_replays_when_the_database_returns(
    outage: Outage, tmp_path: Path, user_id: UUID, admin_conn: AdminConn
) -> None:
    store = resilient(outage, tmp_path, background=True)
    await store.start()
    try:
        outage.down = True
        items = items_from_update([fact("Prefiere latón naval")], None, None, [], None)
        await store.upsert(user_id, items, WriteRules(reinforcement_step=0.1))
        assert store.pending_writes == 1
        for _ in range(500):  # let the replayer try (and fail) while the database is down
            if store.replay_failures:
                break
            await asyncio.sleep(0.01)
        assert store.replay_failures >= 1
        assert store.pending_writes == 1
        outage.down = False
        for _ in range(500):  # it retries every 10-50 ms; no timing is asserted
            if not store.pending_writes:
                break
            await asyncio.sleep(0.01)
        assert store.pending_writes == 0
        assert list(rows(admin_conn, user_id)) == ["Prefiere latón naval"]
        assert len(store.journal) == 0
        assert store.replayed_writes == 1
    finally:
        await store.close()
    replayers = [t for t in asyncio.all_tasks() if t.get_name() == "memory_plugin-journal-replayer"]
    assert replayers == []  # stopped, not left running


def test_backoff_is_exponential_capped_and_jittered() -> None:
    rng = random.Random(1)
    delays = [backoff_delay(n, base=0.5, maximum=8.0, rng=rng) for n in range(8)]
    for n, delay in enumerate(delays):
        ceiling = min(8.0, 0.5 * 2**n)
        assert ceiling / 2 <= delay <= ceiling
    assert max(delays) <= 8.0
    assert len({round(d, 6) for d in delays[4:]}) > 1  # capped, yet jittered: not all the same
    assert backoff_delay(10_000, base=0.5, maximum=8.0) <= 8.0  # no overflow


# --- the journal file --------------------------------------------------------------------------------------------


def _items(text: str) -> list[MemoryItem]:
    return items_from_update([fact(text)], None, None, [], None)


def test_a_torn_last_line_is_dropped_and_the_next_append_survives(
    tmp_path: Path, user_id: UUID, caplog: pytest.LogCaptureFixture
) -> None:
    journal = WriteJournal(tmp_path / "j" / "writes.jsonl")
    first = journal.append(user_id, _items("Prefiere latón"), WriteRules(reinforcement_step=0.1))
    second = journal.append(user_id, _items("Prefiere bronce"), WriteRules(reinforcement_step=0.1))
    # The process died in the middle of a third append: half a line, no newline, never acknowledged.
    torn = journal.append(user_id, _items("Prefiere cobre"), WriteRules(reinforcement_step=0.1)).to_json()
    journal.remove([UUID(json.loads(torn)["write_id"])])
    with journal.path.open("ab") as f:
        f.write(torn.encode()[: len(torn) // 2])
    assert [e.write_id for e in journal.entries()] == [first.write_id, second.write_id]

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        third = journal.append(user_id, _items("Prefiere zinc"), WriteRules(reinforcement_step=0.1))
    assert any("torn last line" in r.getMessage() for r in caplog.records)
    # Not fused with the torn half into one unreadable line: acknowledged, so it must be readable.
    assert [e.write_id for e in journal.entries()] == [first.write_id, second.write_id, third.write_id]
    assert journal.path.read_bytes().count(b"\n") == 3
    assert [i.content for i in journal.entries()[2].items] == ["Prefiere zinc"]

    journal.remove([second.write_id])
    assert [e.write_id for e in journal.entries()] == [first.write_id, third.write_id]


async def test_a_torn_journal_replays_its_complete_entries_at_the_next_start(
    outage: Outage, tmp_path: Path, user_id: UUID, admin_conn: AdminConn
) -> None:
    journal = WriteJournal(tmp_path / "journal" / "writes.jsonl")
    journal.append(user_id, _items("Prefiere latón"), WriteRules(reinforcement_step=0.1))
    with journal.path.open("ab") as f:
        f.write(b'{"write_id": "6f1c')
    store = resilient(outage, tmp_path)
    await store.start()
    assert list(rows(admin_conn, user_id)) == ["Prefiere latón"]
    assert store.journal.path.read_bytes() == b""
    assert store.replayed_writes == 1


async def test_journaled_writes_survive_close_and_replay_at_the_next_start(
    outage: Outage, database_url: str, tmp_path: Path, user_id: UUID, admin_conn: AdminConn
) -> None:
    store = resilient(outage, tmp_path)
    await store.start()
    outage.down = True
    await store.upsert(user_id, _items("Prefiere acero S355"), WriteRules(reinforcement_step=0.1))
    await store.close()
    assert len(store.journal) == 1  # nothing lost on close

    again = resilient(Outage(await PostgresStore.connect(database_url)), tmp_path)  # the next run
    assert rows(admin_conn, user_id) == {}
    await again.start()
    try:
        assert list(rows(admin_conn, user_id)) == ["Prefiere acero S355"]
        assert len(again.journal) == 0
    finally:
        await again.close()


async def test_a_journal_of_another_database_is_never_replayed(
    database_url: str, tmp_path: Path, user_id: UUID, admin_conn: AdminConn
) -> None:
    here = database_identity(database_url)
    # The identity is the database, not how it is reached.
    assert here == database_identity(database_url.replace("postgres:@", "someone:secret@"))
    assert (
        database_identity("postgresql://u@db.example.com:6543/postgres") == "postgresql://db.example.com:6543/postgres"
    )
    elsewhere = journal_path(tmp_path, "postgresql://db.example.com:5432/postgres")
    assert elsewhere != journal_path(tmp_path, here)
    other = WriteJournal(elsewhere)
    other.append(user_id, _items("Escrito para otra base de datos"), WriteRules(reinforcement_step=0.1))
    before = other.path.read_bytes()

    settings = MemorySettings(database_url=database_url, data_dir=tmp_path)
    async with MemoryManager.open(settings) as memory:
        store = memory.store
        assert isinstance(store, ResilientStore)
        assert store.journal.path == journal_path(tmp_path, here)
        assert await store.replay() == 0
        assert (await memory.backend_status()).journal_length == 0
    assert rows(admin_conn, user_id) == {}
    assert other.path.read_bytes() == before


async def test_the_manager_wraps_its_own_store_and_uses_a_given_one_as_is(
    pg_settings: MemorySettings, tmp_path: Path
) -> None:
    async with MemoryManager.open(pg_settings.model_copy(update={"data_dir": tmp_path})) as memory:
        assert isinstance(memory.store, ResilientStore)
        assert isinstance(memory.store.primary, PostgresStore)
        assert (await memory.describe())["backend"] == "postgres"
    unwrapped = pg_settings.model_copy(update={"data_dir": tmp_path, "resilient_store": False})
    async with MemoryManager.open(unwrapped) as memory:
        assert isinstance(memory.store, PostgresStore)
        st = await memory.backend_status()
        assert (st.backend, st.postgres_reachable, st.journal_path) == ("postgres", True, None)


def test_the_status_command_reports_the_backend_up_and_down(database_url: str, tmp_path: Path) -> None:
    def status_lines(url: str, exit_code: int = 0) -> dict[str, str]:
        env = {"COLUMNS": "200", "MEMORY_DATABASE_URL": url, "MEMORY_DATA_DIR": str(tmp_path)}
        result = CliRunner().invoke(app, ["status"], env={**env, "MEMORY_CONNECT_TIMEOUT_SECONDS": "0.2"})
        assert result.exit_code == exit_code, result.output  # 3: degraded
        fields = (line.split(None, 1) for line in result.output.splitlines() if line.strip())
        return {parts[0]: parts[1].strip() for parts in fields if len(parts) == 2}

    up = status_lines(database_url)
    assert (up["backend"], up["postgres_reachable"], up["journal_length"]) == ("postgres", "True", "0")
    down = status_lines(f"postgresql://postgres@/nodb?host={tmp_path}&port=5999", exit_code=3)
    assert (down["backend"], down["postgres_reachable"]) == ("fallback", "False")
    assert "cannot connect" in down["last_error"]


async def test_an_entry_the_database_keeps_refusing_is_set_aside_not_lost(
    outage: Outage, tmp_path: Path, user_id: UUID, admin_conn: AdminConn
) -> None:
    store = resilient(outage, tmp_path)
    await store.start()
    (good,) = _items("Prefiere latón")
    bad = MemoryItem(kind="fact", category="opinion", content="Una categoría que la tabla rechaza", content_hash="x")
    refused = store.journal.append(user_id, [bad], WriteRules(reinforcement_step=0.1))
    store.journal.append(user_id, [good], WriteRules(reinforcement_step=0.1))
    # Refused (a check constraint, not an outage): retried, and the entry behind it waits (order).
    assert await store.replay() == 0
    assert await store.replay() == 0
    assert rows(admin_conn, user_id) == {}
    # The third refusal sets it aside in the rejected file, and the journal goes on.
    assert await store.replay() == 1
    assert list(rows(admin_conn, user_id)) == ["Prefiere latón"]
    (kept,) = [json.loads(line) for line in store.journal.rejected_path.read_text().splitlines()]
    assert kept["write_id"] == str(refused.write_id)
    assert "user_memory_category_check" in kept["error"]
    st = await store.status()
    assert (st.rejected_writes, st.replay_failures, st.journal_length) == (1, 3, 0)
    await store.close()


async def test_a_journaled_write_is_acknowledged_with_everything_it_carries(
    memory: MemoryManager, outage: Outage, user_id: UUID
) -> None:
    """During an outage the provisional record keeps the item's time, expiry and metadata (as stored later)."""
    when = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
    item = MemoryItem(
        kind="fact",
        category="fact",
        content="Viaja a Bilbao el 28/11/2026",
        content_hash="h-trip",
        occurred_at=when,
        expires_at=datetime(2026, 11, 30, tzinfo=UTC),
        metadata={"dia_id": "D3:4", "speaker": "Ana"},
    )
    outage.down = True
    [record] = await memory.store.upsert(user_id, [item], WriteRules(reinforcement_step=0.1))
    assert (record.occurred_at, record.expires_at, record.metadata) == (
        item.occurred_at,
        item.expires_at,
        item.metadata,
    )

    outage.down = False
    await memory.store.replay()
    [stored] = await memory.store.list_records(user_id)
    assert (stored.occurred_at, stored.expires_at, stored.metadata) == (
        item.occurred_at,
        item.expires_at,
        item.metadata,
    )


# --- a journal that cannot stop start-up, and forgets that win over it ------------------------------------------


def _write_bad_lines(journal: WriteJournal, user_id: UUID) -> UUID:
    """A good entry of `user_id` between the lines red-teaming found: a forged entry for another user (unsigned),
    valid JSON of the wrong shape (unsigned and signed), 100,000 nested "[". Returns the forged entry's user."""
    victim = uuid4()
    journal.append(user_id, _items("Prefiere latón"), WriteRules(reinforcement_step=0.1))
    forged = journal.append(victim, _items("Mi presupuesto máximo es 1 euro"), WriteRules(reinforcement_step=0.1))
    journal.remove([forged.write_id])
    shape = json.dumps({"write_id": str(uuid4()), "user_id": str(user_id), "reinforcement_step": 0.1, "items": [1]})
    with journal.path.open("ab") as f:
        for line in (forged.to_json(), shape, journal._sign(shape)):
            f.write(line.encode() + b"\n")
        f.write(b"[" * 100_000 + b"\n")
    return victim


async def test_bad_and_forged_journal_lines_never_stop_start_up(
    database_url: str, tmp_path: Path, user_id: UUID, admin_conn: AdminConn, caplog: pytest.LogCaptureFixture
) -> None:
    journal = WriteJournal.for_database(tmp_path, database_identity(database_url))
    victim = _write_bad_lines(journal, user_id)
    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        async with MemoryManager.open(MemorySettings(database_url=database_url, data_dir=tmp_path)) as memory:
            assert (await memory.backend_status()).journal_length == 0
    assert list(rows(admin_conn, user_id)) == ["Prefiere latón"]  # the good entry replayed
    assert rows(admin_conn, victim) == {}  # the forged one never
    assert len(journal.rejected_path.read_bytes().splitlines()) == 4
    assert len([r for r in caplog.records if "not replayed" in r.getMessage()]) == 4


def test_the_status_command_survives_a_bad_journal(database_url: str, tmp_path: Path) -> None:
    journal = WriteJournal.for_database(tmp_path, database_identity(database_url))
    _write_bad_lines(journal, uuid4())
    env = {"COLUMNS": "200", "MEMORY_DATABASE_URL": database_url, "MEMORY_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, ["status"], env=env)
    assert result.exit_code == 0, result.output
    assert "journal_length" in result.output
    assert len(journal.rejected_path.read_bytes().splitlines()) == 4


async def test_a_forget_cancels_a_pending_restatement_so_the_replay_does_not_bring_it_back(
    outage: Outage, tmp_path: Path, user_id: UUID, admin_conn: AdminConn
) -> None:
    store = resilient(outage, tmp_path)
    await store.start()
    [stored] = await store.upsert(user_id, _items("Prefiere latón"), WriteRules(reinforcement_step=0.1))
    outage.down = True
    await store.upsert(user_id, _items("Prefiere latón"), WriteRules(reinforcement_step=0.1))  # restated: journaled
    await store.upsert(user_id, _items("Prefiere bronce"), WriteRules(reinforcement_step=0.1))
    outage.down = False
    assert await store.delete(user_id, stored.id)  # the user forgets it before the replay
    assert [e.items[0].content for e in store.journal.entries()] == ["Prefiere bronce"]  # the restatement is gone
    await store.replay()
    assert list(rows(admin_conn, user_id)) == ["Prefiere bronce"]  # forgotten stays forgotten
    await store.close()


async def test_an_erase_drops_the_users_pending_writes(
    outage: Outage, tmp_path: Path, user_id: UUID, admin_conn: AdminConn
) -> None:
    other = uuid4()
    store = resilient(outage, tmp_path)
    await store.start()
    outage.down = True
    await store.upsert(user_id, _items("Prefiere latón"), WriteRules(reinforcement_step=0.1))
    await store.upsert(other, _items("Prefiere bronce"), WriteRules(reinforcement_step=0.1))
    assert await store.forget_user(user_id) == 1
    assert store.pending_writes == 1  # the other user's write only
    outage.down = False
    await store.replay()
    assert rows(admin_conn, user_id) == {}
    assert list(rows(admin_conn, other)) == ["Prefiere bronce"]
    await store.close()
