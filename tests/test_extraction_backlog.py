"""A user's extraction past their limit of waiting jobs is never lost: the messages wait in the user's durable
backlog (a deferred job in Postgres, redacted like every job), outlive the session and the process, and are
extracted once the user's jobs fall below the limit; another user's extraction is never refused meanwhile.

On a database of its own (a new database on the session's server), so that no other test's jobs are in the queue.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin.extraction import LLMExtractor
from memory_plugin.manager import MemoryManager
from memory_plugin.models import Message
from tests.background_child import fact_response, prompt_of, settings_for
from tests.test_supabase_project import fresh_db  # noqa: F401 - the fixture

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

CARD = "4111 1111 1111 1111"
METALS = ("titanio", "cobre")


def extract_metals(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A fact for each metal the conversation says the user prefers; nothing for anything else."""
    prompt = prompt_of(messages)
    return fact_response(info, [f"Prefiere {metal}" for metal in METALS if f"prefiero {metal}" in prompt])


async def facts_of(memory: MemoryManager, user: UUID) -> set[str]:
    return {r.content for r in await memory.list_memory(user)}


async def until_facts(memory: MemoryManager, user: UUID, wanted: set[str], seconds: float = 240.0) -> None:
    """Poll until the user holds `wanted` (a deadlock guard, not a timing assertion)."""
    for _ in range(int(seconds / 0.2)):
        if wanted <= await facts_of(memory, user):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"still not stored after {seconds}s: {wanted - await facts_of(memory, user)}")


async def test_a_users_extraction_past_100_waiting_jobs_outlives_the_session_and_is_extracted_later(
    fresh_db: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    user, other = uuid4(), uuid4()
    extractor = LLMExtractor(FunctionModel(extract_metals))
    settings = settings_for(fresh_db, str(tmp_path), background_worker=False)  # nothing runs the jobs yet
    async with MemoryManager.open(settings, extractor=extractor) as memory:
        limit = settings.background_max_pending_jobs_per_user
        assert limit == 100
        for i in range(limit):
            reference = Message(role="user", content=f"Recuerda la referencia R-{i}.")
            await memory.add_message(f"s{i}", reference, user_id=user)
            assert (await memory.schedule_extraction(f"s{i}", user)).outcome == "queued"
        said = f"Recuerda que prefiero titanio; paga con la {CARD}."
        await memory.add_message("last", Message(role="user", content=said), user_id=user)
        deferred = await memory.schedule_extraction("last", user)
        assert deferred.outcome == "deferred"
        # Another user is never refused, whatever this user holds.
        await memory.add_message("o", Message(role="user", content="Recuerda que prefiero cobre."), user_id=other)
        assert (await memory.schedule_extraction("o", other)).outcome == "queued"
        assert (await memory.queue_status()).deferred == 1
    # The process ends: its RAM sessions (where refused messages used to wait) are gone.

    with psycopg.connect(fresh_db) as conn:
        row = conn.execute(
            "select state, payload::text from public.memory_jobs where user_id = %s and session_id = 'last'", (user,)
        ).fetchone()
    assert row is not None
    state, payload = row
    assert state == "deferred"
    assert "prefiero titanio" in payload
    assert CARD not in payload  # redacted at rest, as every job

    worker_settings = settings_for(fresh_db, str(tmp_path), background_concurrency=4)
    async with MemoryManager.open(worker_settings, extractor=extractor) as memory:
        await until_facts(memory, user, {"Prefiere titanio"})
        await until_facts(memory, other, {"Prefiere cobre"})
        status = await memory.queue_status()
        assert (status.deferred, status.dead) == (0, 0)
    with psycopg.connect(fresh_db) as conn:
        left: Any = conn.execute("select count(*) from public.memory_jobs where user_id = %s", (user,)).fetchone()
    assert left == (0,)
