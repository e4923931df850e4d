"""An extraction whose write is over a database limit never holds the session back: a write stopped at the
lock timeout is sent again after a short backoff, then the facts are written in halves, and a single fact
still over the limit is set aside with the reason, kept durably beside the outage journal's set-aside writes
(`status`, `memory-plugin journal`, `--readmit`, `--discard`), inline or in a background job (which then
completes); the cursor moves on, and the session's later extractions and the user's later writes run.

The limits are real: a pool whose sessions cancel any statement after 1 s, and a trigger that sleeps 3 s when a
row's content starts with "lento:" (tests/test_statement_limits.py); a pool whose sessions wait 300 ms for a
lock, and a row another connection holds `FOR UPDATE`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
from pathlib import Path
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate, PostgresStore, ResilientStore
from memory_plugin.background import BackgroundWorker, ExtractionJob, InProcessJobQueue, JobQueue
from memory_plugin.cli import app
from memory_plugin.crypto import parse_key_ring
from memory_plugin.errors import StatementLimitError
from memory_plugin.extraction import LLMExtractor
from memory_plugin.models import Message
from memory_plugin.outage import WriteJournal
from memory_plugin.quality.rules import WriteRules
from memory_plugin.store.memory import InMemoryStore
from memory_plugin.store.sealed import SealedStore
from memory_plugin.write.items import items_from_update
from tests.background_child import fact_response, prompt_of, settings_for
from tests.test_encryption import new_key
from tests.test_statement_limits import (  # noqa: F401
    SLOW,
    AdminConn,
    contents,
    journal_for,
    slow_inserts,
    timed_store,
    timed_url,
)

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

# What each message makes the extractor propose: "despacio" a fact that outlasts the statement timeout.
FACTS = {
    "latón": "Prefiere latón",
    "despacio": f"{SLOW} entrega en 3 semanas",
    "bronce": "Prefiere bronce",
    "titanio": "Prefiere titanio",
    "pausado": f"{SLOW} revisión cada 2 semanas",
}
LOCK_MS = 300


class Extractor:
    """Proposes the facts of `FACTS` whose key is in the messages it is given, and records those messages."""

    def __init__(self, facts: dict[str, str] = FACTS) -> None:
        self.prompts: list[str] = []
        self.facts = facts

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = prompt_of(messages)
        self.prompts.append(prompt)
        return fact_response(info, [fact for key, fact in self.facts.items() if key in prompt])


async def say(memory: MemoryManager, session: str, user: UUID, text: str) -> None:
    await memory.add_message(session, Message(role="user", content=f"Recuerda que {text}."), user_id=user)


async def test_an_inline_extraction_over_the_timeout_writes_the_rest_keeps_the_facts_set_aside_and_moves_on(
    timed_url: str,  # noqa: F811
    database_url: str,
    tmp_path: Path,
    admin_conn: AdminConn,
) -> None:
    user, session, extractor = uuid4(), f"s-{uuid4()}", Extractor()
    journal = journal_for(database_url, tmp_path)  # the one `memory-plugin journal` reads
    store = ResilientStore(await timed_store(timed_url), journal, background=False)
    settings = MemorySettings(data_dir=tmp_path, embedding_model="none", background_extraction=False)
    async with MemoryManager.open(settings, store=store, extractor=LLMExtractor(FunctionModel(extractor))) as memory:
        await say(memory, session, user, "prefiero latón, que lo entreguen despacio y lo revisen pausado")
        run = await memory.extract_if_due(session, user)
        assert run.set_aside == 2
        assert "statement_timeout" in (run.error or "")
        assert "memory-plugin journal" in (run.error or "")
        assert [f.content for f in run.stored] == ["Prefiere latón"]
        assert memory.stats.extraction_facts_set_aside == 2

        # The next trigger extracts only the new message: the one over the limit is not retried forever.
        await say(memory, session, user, "prefiero bronce")
        again = await memory.extract_if_due(session, user)
        assert (again.error, again.set_aside) == (None, 0)
        assert "despacio" not in extractor.prompts[-1]
        assert "bronce" in extractor.prompts[-1]
        status = await memory.backend_status()
        # A limit is not an outage, and what was set aside is kept and counted.
        assert (status.backend, status.journal_length, status.set_aside_writes) == ("postgres", 0, 2)
    assert contents(admin_conn, user) == {"Prefiere latón", "Prefiere bronce"}

    # Durable: after the process is gone, an operator sees both, with the reason, and retries or drops each.
    by_content = {entry.items[0].content: entry for entry, _ in journal.rejected()}
    assert set(by_content) == {FACTS["despacio"], FACTS["pausado"]}
    env = {"COLUMNS": "250", "MEMORY_DATABASE_URL": database_url, "MEMORY_DATA_DIR": str(tmp_path)}
    listed = CliRunner().invoke(app, ["journal"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "set aside for review (2)" in listed.output
    assert f"extracted from session {session}" in listed.output
    assert "statement_timeout" in listed.output
    dropped = by_content[FACTS["pausado"]].write_id
    discard = CliRunner().invoke(app, ["journal", "--discard", "--write-id", str(dropped)], env=env)
    assert discard.exit_code == 0, discard.output
    assert "discarded 1" in discard.output
    admin_conn.execute("drop trigger if exists test_slow_insert on public.user_memory")  # the limit was raised
    readmit = CliRunner().invoke(app, ["journal", "--readmit"], env=env)
    assert readmit.exit_code == 0, readmit.output
    assert "readmitted 1" in readmit.output
    later = ResilientStore(await PostgresStore.connect(database_url, max_size=2), journal, background=False)
    await later.start()  # a manager's next start replays it
    status = await later.status()
    await later.close()
    assert (status.journal_length, status.set_aside_writes) == (0, 0)
    assert contents(admin_conn, user) == {"Prefiere latón", "Prefiere bronce", FACTS["despacio"]}


async def test_a_background_job_over_the_timeout_completes_keeps_the_fact_set_aside_and_the_session_goes_on(
    timed_url: str,  # noqa: F811
    tmp_path: Path,
    admin_conn: AdminConn,
) -> None:
    user, session, extractor = uuid4(), f"s-{uuid4()}", Extractor()
    journal = WriteJournal(tmp_path / "j" / "writes.jsonl")
    store = ResilientStore(await timed_store(timed_url), journal, background=False)
    settings = MemorySettings(
        data_dir=tmp_path, embedding_model="none", background_poll_seconds=0.1, background_retry_base_seconds=30.0
    )
    async with MemoryManager.open(settings, store=store, extractor=LLMExtractor(FunctionModel(extractor))) as memory:
        await say(memory, session, user, "prefiero latón y que lo entreguen despacio")
        assert (await memory.schedule_extraction(session, user)).outcome == "queued"
        assert await memory.flush(timeout=60)
        queue = await memory.queue_status()
        # Done at its first attempt: the rest written, the fact over the limit kept for review, nothing dead.
        assert (queue.dead, queue.retrying, queue.failed_attempts, queue.depth) == (0, 0, 0, 0)
        assert memory.stats.extraction_facts_set_aside == 1
        assert (await memory.backend_status()).set_aside_writes == 1
        ((entry, reason),) = journal.rejected()
        assert [i.content for i in entry.items] == [FACTS["despacio"]]
        assert "statement_timeout" in reason

        await say(memory, session, user, "prefiero titanio")
        assert (await memory.schedule_extraction(session, user)).outcome == "queued"
        assert await memory.flush(timeout=60)
        assert "despacio" not in extractor.prompts[-1]
    assert contents(admin_conn, user) == {"Prefiere latón", "Prefiere titanio"}


LOCKED = {"tornillos": "Usa tornillos M8", "anodizado": "Pide anodizado negro"}


def fact(content: str) -> MemorizedFact:
    return MemorizedFact(content=content, category="preference", confidence=0.9, source="explicit")


async def lock_row(url: str, user: UUID, content: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """A connection holding the user's row `content` `FOR UPDATE` until it commits or rolls back."""
    conn = await psycopg.AsyncConnection.connect(url)
    await conn.execute(
        "select 1 from public.user_memory where user_id = %s and content = %s for update", (user, content)
    )
    return conn


async def release_after_a_lock_timeout(url: str, holder: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    """Commit `holder` once another session has waited for its lock longer than the lock timeout."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watch:
        waiting = "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
        for _ in range(3000):  # 30 s at most
            if (await (await watch.execute(waiting)).fetchone() or (0,))[0]:
                break
            await asyncio.sleep(0.01)
    await asyncio.sleep(2 * LOCK_MS / 1000)
    await holder.commit()


async def locked_memory(
    database_url: str, tmp_path: Path, user: UUID
) -> tuple[MemoryManager, ResilientStore, WriteJournal]:
    """A manager on sessions that wait `LOCK_MS` for a lock, whose extractor proposes `LOCKED`; the user already
    holds "Usa tornillos M8", which the job's write reinforces."""
    url = make_conninfo(database_url, options=f"-c lock_timeout={LOCK_MS}")
    journal = WriteJournal(tmp_path / "j" / "writes.jsonl")
    store = ResilientStore(await PostgresStore.connect(url, max_size=2), journal, background=False)
    settings = MemorySettings(
        data_dir=tmp_path, embedding_model="none", background_poll_seconds=0.1, background_retry_base_seconds=30.0
    )
    memory = await MemoryManager.create(settings, store=store, extractor=LLMExtractor(FunctionModel(Extractor(LOCKED))))
    await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact(LOCKED["tornillos"])]))
    return memory, store, journal


def reinforced(admin_conn: AdminConn, user: UUID, content: str) -> int:
    found = admin_conn.execute(
        "select relevance_count from public.user_memory where user_id = %s and content = %s", (user, content)
    ).fetchone()
    assert found is not None
    return int(found[0])


async def test_a_background_job_waits_out_a_lock_held_for_a_moment_and_writes_everything(
    database_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    memory, _store, journal = await locked_memory(database_url, tmp_path, user)
    try:
        holder = await lock_row(database_url, user, LOCKED["tornillos"])
        release = asyncio.create_task(release_after_a_lock_timeout(database_url, holder))
        await say(memory, session, user, "uso tornillos M8 y pido anodizado negro")
        assert (await memory.schedule_extraction(session, user)).outcome == "queued"
        assert await memory.flush(timeout=60)
        await release
        await holder.close()
        queue = await memory.queue_status()
        # The write met the lock timeout at least once (the lock was let go only after that), and was sent
        # again: one job, no failed attempt, nothing set aside.
        assert (queue.dead, queue.failed_attempts, queue.depth) == (0, 0, 0)
        assert memory.stats.extraction_facts_set_aside == 0
        assert journal.rejected() == []
    finally:
        await memory.close()
    assert contents(admin_conn, user) == set(LOCKED.values())
    assert reinforced(admin_conn, user, LOCKED["tornillos"]) == 1


async def test_a_background_job_sets_aside_only_the_fact_whose_row_stays_locked_and_blocks_no_later_write(
    database_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    user, session = uuid4(), f"s-{uuid4()}"
    memory, store, journal = await locked_memory(database_url, tmp_path, user)
    holder = await lock_row(database_url, user, LOCKED["tornillos"])
    try:
        await say(memory, session, user, "uso tornillos M8 y pido anodizado negro")
        assert (await memory.schedule_extraction(session, user)).outcome == "queued"
        assert await memory.flush(timeout=60)
        queue = await memory.queue_status()
        assert (queue.dead, queue.failed_attempts, queue.depth) == (0, 0, 0)
        assert memory.stats.extraction_facts_set_aside == 1
        ((entry, reason),) = journal.rejected()
        assert [i.content for i in entry.items] == [LOCKED["tornillos"]]
        assert "lock_timeout" in reason
        assert (await memory.backend_status()).set_aside_writes == 1
        # The rest of the job is applied, and the user's later writes go straight on (the lock is still held).
        assert contents(admin_conn, user) == set(LOCKED.values())
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact("Prefiere titanio")]))
        assert "Prefiere titanio" in contents(admin_conn, user)
        assert (await memory.backend_status()).journal_length == 0

        # Once the lock is gone, the fact set aside is written when readmitted (applied once).
        await holder.rollback()
        assert [e.write_id for e in journal.readmit()] == [entry.write_id]
        await store.replay()
        assert reinforced(admin_conn, user, LOCKED["tornillos"]) == 1
        assert (journal.entries(), journal.rejected()) == ([], [])
    finally:
        await holder.close()
        await memory.close()


async def test_a_job_stopped_at_a_lock_timeout_outside_its_write_is_retried_not_dead() -> None:
    """A lock timeout elsewhere in the job (its hold, its completion) is retried with backoff like any transient
    failure; any other statement limit is still dead at once (it fails the same way every time)."""
    queue = InProcessJobQueue(max_pending=10, max_messages=20)
    seen: list[str] = []

    async def handler(job: ExtractionJob, queue: JobQueue, worker: str) -> None:
        seen.append(job.session_id)
        if job.session_id == "statement" or job.attempts == 1:
            limit = "statement_timeout" if job.session_id == "statement" else "lock_timeout"
            raise StatementLimitError(f"Postgres stopped the job at its {limit} limit", limit=limit)
        async with queue.hold(job, worker):
            pass

    worker = BackgroundWorker(
        queue, handler, concurrency=2, poll_seconds=0.02, lease_seconds=30.0, max_attempts=3,
        retry_base_seconds=0.01, retry_max_seconds=0.02,
    )  # fmt: skip
    said = [Message(role="user", content="Recuerda que prefiero latón.")]
    for session in ("lock", "statement"):
        await queue.enqueue(uuid4(), session, said, "explicit")
    worker.start()
    try:
        for _ in range(500):  # 10 s at most
            if seen.count("lock") == 2 and (await queue.status()).dead == 1:
                break
            await asyncio.sleep(0.02)
    finally:
        await worker.stop(1.0)
    status = await queue.status()
    assert (seen.count("lock"), seen.count("statement")) == (2, 1)
    assert (status.dead, status.depth, worker.stats.jobs_done) == (1, 0, 1)


async def test_a_fact_set_aside_with_encryption_keys_is_kept_sealed(tmp_path: Path) -> None:
    """What the store keeps for review is sealed as a written row would be: the rejected file never holds the
    plain text of a sensitive fact."""
    user, journal = uuid4(), WriteJournal(tmp_path / "j" / "writes.jsonl")
    ring = parse_key_ring(f"k1:{new_key()}", None, base64.b64encode(os.urandom(32)).decode())
    store = SealedStore(ResilientStore(InMemoryStore(), journal, background=False), ring, ("health_note",))
    secret = MemorizedFact(content="Toma insulina glargina", category="fact", confidence=1.0, source="explicit")
    items = [dataclasses.replace(i, sensitive=True) for i in items_from_update([secret], None, None, [], None)]
    assert await store.set_aside(user, items, WriteRules(), write_id=uuid4(), reason="over the limit")
    ((entry, reason),) = journal.rejected()
    assert reason == "over the limit"
    assert entry.items[0].content.startswith("sealed:v1:k1:")
    assert entry.items[0].occurred_at is not None  # a readmitted fact keeps the time it was said
    assert b"glargina" not in journal.rejected_path.read_bytes()
    assert not await InMemoryStore().set_aside(user, items, WriteRules(), write_id=uuid4(), reason="x")


async def test_with_the_durable_queue_a_job_sets_aside_the_fact_whose_row_stays_locked_and_completes(
    database_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    """The same on the Postgres job queue (the job held by its own transaction while it writes) and the
    manager's own outage journal, the one `memory-plugin status` and `journal` read."""
    user, session = uuid4(), f"s-{uuid4()}"
    separator = "&" if "?" in database_url else "?"
    url = f"{database_url}{separator}options=-c%20lock_timeout%3D{LOCK_MS}"
    settings = settings_for(url, str(tmp_path)).model_copy(update={"background_retry_base_seconds": 30.0})
    async with MemoryManager.open(settings, extractor=LLMExtractor(FunctionModel(Extractor(LOCKED)))) as memory:
        assert (await memory.queue_status()).backend == "postgres"
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact(LOCKED["tornillos"])]))
        holder = await lock_row(database_url, user, LOCKED["tornillos"])
        try:
            await say(memory, session, user, "uso tornillos M8 y pido anodizado negro")
            earlier = await memory.queue_status()  # the queue's table is the database's: other tests' jobs count
            assert (await memory.schedule_extraction(session, user)).outcome == "queued"
            assert await memory.flush(timeout=60)
            queue = await memory.queue_status()
            assert (queue.dead - earlier.dead, queue.failed_attempts - earlier.failed_attempts, queue.depth) == (
                0,
                0,
                0,
            )
            assert contents(admin_conn, user) == set(LOCKED.values())
            assert (await memory.backend_status()).set_aside_writes == 1
        finally:
            await holder.rollback()
            await holder.close()
    env = {"COLUMNS": "250", "MEMORY_DATABASE_URL": url, "MEMORY_DATA_DIR": str(tmp_path)}
    listed = CliRunner().invoke(app, ["journal"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "set aside for review (1)" in listed.output
    assert "lock_timeout" in listed.output
