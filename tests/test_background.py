"""Extraction off the request path: queued by the capability, run by a background worker, durable in Postgres
(a killed process's work is done at the next start, once), shared by worker processes (each job once), and
never applied for a user erased or a memory forgotten in between."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
import pytest_asyncio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import MemoryCapability, MemoryDeps, MemoryManager
from memory_plugin.background import InProcessJobQueue
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.extraction import LLMExtractor
from memory_plugin.models import Message
from memory_plugin.settings import MemorySettings
from memory_plugin.store import InMemoryStore
from tests.background_child import fact_response, prompt_of, settings_for
from tests.test_supabase_project import app_memory, app_role  # noqa: F401 - the production login role

CHILD = Path(__file__).with_name("background_child.py")
ROOT = Path(__file__).resolve().parents[1]


class GatedExtractor:
    """A FunctionModel body that waits for `gate` before answering with facts for each "prefiero X" said."""

    def __init__(self, facts: list[str]) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.facts = facts
        self.calls = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        self.started.set()
        await self.gate.wait()
        return fact_response(info, [f for f in self.facts if f.split()[-1].lower() in prompt_of(messages).lower()])


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Anotado.")])


async def until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 60.0) -> None:
    """Poll `check` until it holds (a deadlock guard, not a timing assertion)."""
    for _ in range(int(seconds / 0.1)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"still not true after {seconds}s: {what}")


@pytest_asyncio.fixture(loop_scope="session")
async def gated(database_url: str, data_dir: Path) -> AsyncIterator[tuple[MemoryManager, GatedExtractor]]:
    extractor = GatedExtractor(["Prefiere latón", "Prefiere bronce"])
    settings = settings_for(database_url, str(data_dir))
    async with MemoryManager.open(settings, extractor=LLMExtractor(FunctionModel(extractor))) as memory:
        yield memory, extractor
        extractor.gate.set()


def contents(records: list[Any]) -> set[str]:
    return {r.content for r in records}


@pytest.mark.slow
async def test_the_turn_returns_before_a_slow_extraction_and_the_facts_appear_after_flush(
    gated: tuple[MemoryManager, GatedExtractor], user_id: UUID
) -> None:
    memory, extractor = gated
    agent = Agent(FunctionModel(answer), deps_type=MemoryDeps, capabilities=[MemoryCapability(memory)])
    deps = MemoryDeps(session_id=f"s-{uuid4()}", user_id=user_id)

    # The extraction model cannot answer until the gate opens: a run that waited for it would never return.
    result = await asyncio.wait_for(agent.run("Recuerda que prefiero latón.", deps=deps), 30)
    assert result.output == "Anotado."
    await asyncio.wait_for(extractor.started.wait(), 30)  # the worker is extracting, the turn is over
    assert await memory.list_memory(user_id) == []  # the window: not written yet
    assert (await memory.backend_status()).queue is not None

    extractor.gate.set()
    assert await memory.flush(timeout=30)
    assert contents(await memory.list_memory(user_id)) == {"Prefiere latón"}
    assert memory.stats.extractions_explicit == 1


async def test_triggers_while_a_job_waits_coalesce_into_it(database_url: str, data_dir: Path, user_id: UUID) -> None:
    extractor = GatedExtractor(["Prefiere latón", "Prefiere bronce", "Prefiere cobre"])
    settings = settings_for(database_url, str(data_dir), background_worker=False)
    async with MemoryManager.open(settings, extractor=LLMExtractor(FunctionModel(extractor))) as memory:
        session = f"s-{uuid4()}"
        outcomes = []
        for metal in ("latón", "bronce", "cobre"):  # no worker in this process: the job waits
            await memory.add_message(
                session, Message(role="user", content=f"Recuerda que prefiero {metal}."), user_id=user_id
            )
            outcomes.append((await memory.schedule_extraction(session, user_id)).outcome)
        assert outcomes == ["queued", "coalesced", "coalesced"]
        status = await memory.queue_status()
        assert (status.backend, status.pending >= 1) == ("postgres", True)

    extractor.gate.set()
    async with MemoryManager.open(
        settings_for(database_url, str(data_dir)), extractor=LLMExtractor(FunctionModel(extractor))
    ) as worker:
        await until(lambda: _has_facts(worker, user_id, 3), "the coalesced job ran")
    assert extractor.calls == 1  # one job, one model call, three messages


async def _has_facts(memory: MemoryManager, user_id: UUID, n: int) -> bool:
    return len(await memory.list_memory(user_id)) >= n


async def test_a_full_queue_defers_the_users_messages_and_runs_them_once_there_is_room(user_id: UUID) -> None:
    extractor = GatedExtractor(["Prefiere latón", "Prefiere bronce"])
    settings = MemorySettings(embedding_model="none", background_max_pending_jobs=1, background_worker=False)
    async with MemoryManager.open(
        settings, store=InMemoryStore(), extractor=LLMExtractor(FunctionModel(extractor))
    ) as memory:
        await memory.add_message("a", Message(role="user", content="Recuerda que prefiero latón."), user_id=user_id)
        assert (await memory.schedule_extraction("a", user_id)).outcome == "queued"
        await memory.add_message("b", Message(role="user", content="Recuerda que prefiero bronce."), user_id=user_id)
        deferred = await memory.schedule_extraction("b", user_id)
        assert deferred.outcome == "deferred"
        assert deferred.job_id is not None
        status = await memory.queue_status()
        assert (status.refused, status.deferred) == (0, 1)

        extractor.gate.set()
        # No later trigger of session "b" is needed: its deferred job runs once the user's first job is done.
        await until(lambda: _has_facts(memory, user_id, 2), "the deferred job ran")
        assert contents(await memory.list_memory(user_id)) == {"Prefiere latón", "Prefiere bronce"}


async def test_erasing_the_user_while_the_job_runs_leaves_nothing(
    gated: tuple[MemoryManager, GatedExtractor], database_url: str, user_id: UUID
) -> None:
    memory, extractor = gated
    session = f"s-{uuid4()}"
    await memory.add_message(session, Message(role="user", content="Recuerda que prefiero latón."), user_id=user_id)
    assert (await memory.schedule_extraction(session, user_id)).outcome == "queued"
    await asyncio.wait_for(extractor.started.wait(), 30)

    async with await MemoryAdmin.connect(database_url) as admin:
        await admin.erase_user(user_id)
    extractor.gate.set()
    assert await memory.flush(timeout=30)
    assert await memory.list_memory(user_id) == []
    assert memory._extraction.jobs_dropped == 1


@pytest.mark.parametrize("backend", ["postgres", "memory"])
async def test_a_memory_forgotten_before_the_job_writes_does_not_reappear(
    backend: str, database_url: str, data_dir: Path, user_id: UUID
) -> None:
    extractor = GatedExtractor(["Prefiere latón", "Prefiere bronce"])
    store = InMemoryStore() if backend == "memory" else None
    settings = settings_for(database_url, str(data_dir))
    async with MemoryManager.open(settings, store=store, extractor=LLMExtractor(FunctionModel(extractor))) as memory:
        stored = await memory.remember(user_id, "Prefiere latón", category="preference")
        session = f"s-{uuid4()}"
        await memory.add_message(
            session, Message(role="user", content="Recuerda: prefiero latón y prefiero bronce."), user_id=user_id
        )
        await memory.schedule_extraction(session, user_id)
        await asyncio.wait_for(extractor.started.wait(), 30)  # extracted from messages said before the forget

        assert await memory.forget(user_id, stored.id)
        extractor.gate.set()
        assert await memory.flush(timeout=30)
        assert contents(await memory.list_memory(user_id)) == {"Prefiere bronce"}  # only the forgotten one left out
        assert memory._extraction.facts_dropped_forgotten == 1


async def test_a_job_whose_completion_was_lost_runs_again_and_writes_once(user_id: UUID) -> None:
    """A crash between the write and the job's completion: the job is claimed again once its lease expires,
    and its write (same write_id) changes nothing the second time."""
    extractor = GatedExtractor(["Prefiere latón"])
    extractor.gate.set()
    memory = MemoryManager(
        MemorySettings(embedding_model="none"), InMemoryStore(), extractor=LLMExtractor(FunctionModel(extractor))
    )
    queue = InProcessJobQueue(max_pending=10, max_messages=20)
    await queue.enqueue(user_id, "s", [Message(role="user", content="Recuerda que prefiero latón.")], "explicit")

    [job] = await queue.claim("w1", 1, lease_seconds=0.0)
    real_hold = queue.hold

    def crashing_hold(job: Any, worker: str) -> Any:
        class Crash:
            async def __aenter__(self) -> Any:
                self.inner = real_hold(job, worker)
                return await self.inner.__aenter__()

            async def __aexit__(self, *exc: object) -> None:
                raise RuntimeError("killed after the write, before the completion")

        return Crash()

    queue.hold = crashing_hold  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await memory._extraction.run_job(job, queue, "w1")
    queue.hold = real_hold  # type: ignore[method-assign]

    [again] = await queue.claim("w2", 1, lease_seconds=60.0)  # the lease of w1 expired
    assert (again.id, again.write_id, again.attempts) == (job.id, job.write_id, 2)
    await memory._extraction.run_job(again, queue, "w2")
    [fact] = await memory.list_memory(user_id)
    assert (fact.content, fact.relevance_count) == ("Prefiere latón", 0)  # written once, not reinforced
    assert (await queue.status()).depth == 0
    await memory.close()


async def test_failures_back_off_then_the_job_is_dead_visible_and_retryable(user_id: UUID) -> None:
    calls = 0

    async def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        raise RuntimeError("503 from the extraction model")

    settings = MemorySettings(
        embedding_model="none", background_max_attempts=2, background_retry_base_seconds=0.01,
        background_retry_max_seconds=0.02, background_poll_seconds=0.05,
    )  # fmt: skip
    async with MemoryManager.open(
        settings, store=InMemoryStore(), extractor=LLMExtractor(FunctionModel(broken))
    ) as memory:
        await memory.add_message("s", Message(role="user", content="Recuerda que prefiero latón."), user_id=user_id)
        await memory.schedule_extraction("s", user_id)

        async def dead() -> bool:
            return (await memory.queue_status()).dead == 1

        await until(dead, "the job is dead after two failed attempts")
        status = await memory.queue_status()
        assert (calls, status.failed_attempts, status.depth) == (2, 2, 0)
        assert (await memory.backend_status()).queue == status

        queue, _ = memory._background()
        assert await queue.retry_dead() == 1
        await until(dead, "the retried job failed twice more")
        assert calls == 4


def _queue_rows(database_url: str, user_id: UUID) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute("select state, attempts from public.memory_jobs where user_id = %s", (user_id,)).fetchall()


def _child(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


@pytest.mark.slow
async def test_work_of_a_killed_process_is_done_at_the_next_start_exactly_once(
    database_url: str, data_dir: Path, user_id: UUID
) -> None:
    session = f"s-{uuid4()}"
    child = _child("hang", database_url, str(data_dir), str(user_id), session)
    try:
        assert child.stdout is not None
        job_id = int(await asyncio.to_thread(child.stdout.readline))

        async def leased() -> bool:
            return _queue_rows(database_url, user_id) == [("running", 1)]

        await until(leased, "the child's worker holds the job")
    finally:
        child.send_signal(signal.SIGKILL)  # no close, no release: the lease is all that is left
        child.wait()

    extractor = GatedExtractor(["Prefiere latón"])
    extractor.gate.set()
    async with MemoryManager.open(
        settings_for(database_url, str(data_dir)), extractor=LLMExtractor(FunctionModel(extractor))
    ) as memory:
        await until(lambda: _has_facts(memory, user_id, 1), f"job {job_id} ran after the restart")
        await until(lambda: _no_jobs(database_url, user_id), "the job is complete")
        [fact] = await memory.list_memory(user_id)
        assert (fact.content, fact.relevance_count) == ("Prefiere latón", 0)
    assert extractor.calls == 1


async def _no_jobs(database_url: str, user_id: UUID) -> bool:
    return _queue_rows(database_url, user_id) == []


@pytest.mark.slow
async def test_two_worker_processes_share_the_queue_and_run_each_job_once(
    database_url: str, data_dir: Path, user_id: UUID, tmp_path: Path
) -> None:
    jobs = 12
    settings = settings_for(database_url, str(data_dir), background_worker=False)
    async with MemoryManager.open(settings) as memory:  # queues only: the child processes do the work
        for n in range(jobs):
            session = f"s-{uuid4()}"
            await memory.add_message(
                session, Message(role="user", content=f"Recuerda que llevo el encargo pieza-{n}."), user_id=user_id
            )
            assert (await memory.schedule_extraction(session, user_id)).outcome == "queued"

        log = tmp_path / "extractions.log"
        workers = [_child("work", database_url, str(data_dir), str(log)) for _ in range(2)]
        try:
            await until(lambda: _has_facts(memory, user_id, jobs), "both workers drained the queue", 120)
            await until(lambda: _no_jobs(database_url, user_id), "every job is complete")
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait()

        lines = log.read_text(encoding="utf-8").split()
        markers = lines[0::2]
        assert sorted(markers) == sorted(f"pieza-{n}" for n in range(jobs))  # each job extracted exactly once
        stored = contents(await memory.list_memory(user_id))
        assert stored == {f"Lleva el encargo pieza-{n}" for n in range(jobs)}


async def test_users_read_only_their_own_jobs_and_cannot_run_the_queue(
    database_url: str, data_dir: Path, user_id: UUID
) -> None:
    other = uuid4()
    settings = settings_for(database_url, str(data_dir), background_worker=False)
    async with MemoryManager.open(settings) as memory:
        for uid in (user_id, other):
            session = f"s-{uuid4()}"
            await memory.add_message(session, Message(role="user", content="Recuerda que prefiero latón."), user_id=uid)
            await memory.schedule_extraction(session, uid)

    claims = f'{{"sub": "{user_id}", "role": "authenticated"}}'
    with psycopg.connect(database_url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(
                "select set_config('role', 'authenticated', true), set_config('request.jwt.claims', %s, true)",
                (claims,),
            )
            owners = {row[0] for row in conn.execute("select user_id from public.memory_jobs").fetchall()}
        assert owners == {user_id}
        for statement in (
            "select * from memory_private.memory_jobs_claim('me', 10, 60)",
            "select memory_private.memory_jobs_retry_dead(null)",
            "insert into public.memory_jobs (user_id, session_id, payload) values (auth.uid(), 's', '{}')",
        ):
            with conn.transaction():
                conn.execute(
                    "select set_config('role', 'authenticated', true), set_config('request.jwt.claims', %s, true)",
                    (claims,),
                )
                with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                    conn.execute(statement)
        conn.execute("delete from public.memory_jobs where user_id = any(%s)", ([user_id, other],))


async def test_the_application_login_role_runs_the_queue(app_memory: MemoryManager) -> None:  # noqa: F811
    """Connected as `memory_plugin_app` (no privileges of its own): queue statements switch to memory_worker."""
    user = uuid4()
    await app_memory.add_message(
        "s", Message(role="user", content="Por favor, no me sugieras acero 1045."), user_id=user
    )
    assert (await app_memory.schedule_extraction("s", user)).outcome == "queued"
    assert (await app_memory.queue_status()).backend == "postgres"
    assert await app_memory.flush(timeout=30)
    assert [r.content for r in await app_memory.list_memory(user)] == ["No quiere que le sugieran acero 1045"]
