"""`memory-plugin worker` drains what applications queued; `memory-plugin status` shows the queue."""

from __future__ import annotations

import asyncio
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from typer.testing import CliRunner

from memory_plugin.background import QueueStatus
from memory_plugin.background.postgres_queue import PostgresJobQueue
from memory_plugin.cli import app
from memory_plugin.errors import ExtractionError, StoreUnavailableError
from memory_plugin.extraction.rules import RuleBasedExtractor
from memory_plugin.manager import MemoryManager
from memory_plugin.models import Message
from tests.background_child import settings_for


async def _queue_rejection(database_url: str, data_dir: Path, user_id: UUID) -> None:
    settings = settings_for(database_url, str(data_dir), background_worker=False)  # an app that only queues
    async with MemoryManager.open(settings) as memory:
        session = f"s-{uuid4()}"
        await memory.add_message(
            session, Message(role="user", content="Por favor, no me sugieras acero 1045."), user_id=user_id
        )
        assert (await memory.schedule_extraction(session, user_id)).outcome == "queued"


async def _rejections_in_slots(database_url: str, data_dir: Path, user_id: UUID) -> list[str]:
    from memory_plugin.context.builder import ContextBuilder

    settings = settings_for(database_url, str(data_dir), background_worker=False)
    async with MemoryManager.open(settings) as memory:
        context = await ContextBuilder.open(memory, settings, database_url=memory.database_url)
        try:
            return [entry.text for entry in (await context.slots(user_id)).get("rejections")]
        finally:
            await context.close()


async def _stored(database_url: str, data_dir: Path, user_id: UUID) -> set[str]:
    async with MemoryManager.open(settings_for(database_url, str(data_dir), background_worker=False)) as memory:
        return {r.content for r in await memory.list_memory(user_id)}


def test_worker_command_runs_the_queued_jobs_and_status_shows_the_queue(
    database_url: str, data_dir: Path, user_id: UUID
) -> None:
    asyncio.run(_queue_rejection(database_url, data_dir, user_id))
    env = {
        "MEMORY_DATABASE_URL": database_url,
        "MEMORY_DATA_DIR": str(data_dir),
        "MEMORY_EMBEDDING_MODEL": "none",
        "MEMORY_BACKGROUND_POLL_SECONDS": "0.1",
        "COLUMNS": "200",
    }
    runner = CliRunner()

    status = runner.invoke(app, ["status"], env=env)
    assert status.exit_code == 0, status.output
    assert "queue depth" in status.output
    assert "postgres (durable, shared by workers)" in status.output
    assert "No quiere que le sugieran acero 1045" not in asyncio.run(_stored(database_url, data_dir, user_id))

    worker = runner.invoke(app, ["worker", "--drain"], env=env)
    assert worker.exit_code == 0, worker.output
    assert "No quiere que le sugieran acero 1045" in asyncio.run(_stored(database_url, data_dir, user_id))
    # The worker, another process than the application's, patched the user's slots with the job's fact.
    assert asyncio.run(_rejections_in_slots(database_url, data_dir, user_id)) == [
        "No quiere que le sugieran acero 1045"
    ]

    retried = runner.invoke(app, ["worker", "--retry-dead"], env=env)
    assert retried.exit_code == 0, retried.output
    assert "dead jobs queued again" in retried.output


def _drain_env(database_url: str, data_dir: Path) -> dict[str, str]:
    return {
        "MEMORY_DATABASE_URL": database_url,
        "MEMORY_DATA_DIR": str(data_dir),
        "MEMORY_EMBEDDING_MODEL": "none",
        "MEMORY_BACKGROUND_POLL_SECONDS": "0.05",
        "MEMORY_BACKGROUND_RETRY_BASE_SECONDS": "0.05",
        "MEMORY_BACKGROUND_MAX_ATTEMPTS": "1",
        "COLUMNS": "200",
    }


def test_drain_with_a_starved_pool_exits_0_once_the_jobs_ran(
    database_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_id = uuid4()
    asyncio.run(_queue_rejection(database_url, data_dir, user_id))
    real_status = PostgresJobQueue.status
    calls = 0

    async def starved(self: PostgresJobQueue) -> QueueStatus:
        # The worker's own jobs hold every pool connection: the drain loop's reads time out for a while.
        nonlocal calls
        calls += 1
        if 1 < calls <= 4:
            raise StoreUnavailableError("no Postgres connection available for the job queue operation: timeout")
        return await real_status(self)

    monkeypatch.setattr(PostgresJobQueue, "status", starved)
    worker = CliRunner().invoke(app, ["worker", "--drain"], env=_drain_env(database_url, data_dir))
    assert worker.exit_code == 0, worker.output
    assert calls > 4
    assert "No quiere que le sugieran acero 1045" in asyncio.run(_stored(database_url, data_dir, user_id))


def test_drain_exits_2_when_a_job_died_while_draining(
    database_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_queue_rejection(database_url, data_dir, uuid4()))

    async def broken(*args: object, **kwargs: object) -> object:
        raise ExtractionError("the extractor failed")

    monkeypatch.setattr(RuleBasedExtractor, "extract", broken)
    runner = CliRunner()
    worker = runner.invoke(app, ["worker", "--drain"], env=_drain_env(database_url, data_dir))
    assert worker.exit_code == 2, worker.output
    assert "failed for good" in worker.output
    monkeypatch.undo()
    revived = runner.invoke(app, ["worker", "--retry-dead"], env=_drain_env(database_url, data_dir))
    assert revived.exit_code == 0, revived.output
    again = runner.invoke(app, ["worker", "--drain"], env=_drain_env(database_url, data_dir))
    assert again.exit_code == 0, again.output


async def _queue_past_the_limit(database_url: str, data_dir: Path, user_id: UUID) -> None:
    """One job waiting and one deferred (a per-user limit of one waiting job)."""
    settings = settings_for(
        database_url, str(data_dir), background_worker=False, background_max_pending_jobs_per_user=1
    )
    async with MemoryManager.open(settings) as memory:
        outcomes = []
        for metal in ("acero 1045", "latón"):
            session = f"s-{uuid4()}"
            said = Message(role="user", content=f"Por favor, no me sugieras {metal}.")
            await memory.add_message(session, said, user_id=user_id)
            outcomes.append((await memory.schedule_extraction(session, user_id)).outcome)
        assert outcomes == ["queued", "deferred"]


def test_drain_waits_for_the_deferred_jobs_too(database_url: str, data_dir: Path) -> None:
    user_id = uuid4()
    asyncio.run(_queue_past_the_limit(database_url, data_dir, user_id))
    env = {**_drain_env(database_url, data_dir), "MEMORY_BACKGROUND_MAX_PENDING_JOBS_PER_USER": "1"}
    worker = CliRunner().invoke(app, ["worker", "--drain"], env=env)
    assert worker.exit_code == 0, worker.output
    stored = asyncio.run(_stored(database_url, data_dir, user_id))
    assert {"No quiere que le sugieran acero 1045", "No quiere que le sugieran latón"} <= stored
