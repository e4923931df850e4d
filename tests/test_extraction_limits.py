"""An extraction whose write is over a database limit never holds the session back: the facts are written in
halves, a single fact still over the limit is set aside with the reason (reported in the run, the stats and,
for a background job, its dead-letter record), the cursor moves on, and the session's later extractions run.

The timeout is real: a pool whose sessions cancel any statement after 1 s, and a trigger that sleeps 3 s when a
row's content starts with "lento:" (tests/test_statement_limits.py).
"""

from __future__ import annotations

from pathlib import Path
from uuid import UUID, uuid4

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import MemoryManager, MemorySettings, ResilientStore
from memory_plugin.extraction import LLMExtractor
from memory_plugin.models import Message
from memory_plugin.outage import WriteJournal
from tests.background_child import fact_response, prompt_of
from tests.test_statement_limits import SLOW, AdminConn, contents, slow_inserts, timed_store, timed_url  # noqa: F401

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

# What each message makes the extractor propose: "despacio" a fact that outlasts the statement timeout.
FACTS = {
    "latón": "Prefiere latón",
    "despacio": f"{SLOW} entrega en 3 semanas",
    "bronce": "Prefiere bronce",
    "titanio": "Prefiere titanio",
}


class Extractor:
    """Proposes the facts of `FACTS` whose key is in the messages it is given, and records those messages."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = prompt_of(messages)
        self.prompts.append(prompt)
        return fact_response(info, [fact for key, fact in FACTS.items() if key in prompt])


async def say(memory: MemoryManager, session: str, user: UUID, text: str) -> None:
    await memory.add_message(session, Message(role="user", content=f"Recuerda que {text}."), user_id=user)


async def test_an_inline_extraction_over_the_timeout_writes_the_rest_sets_the_fact_aside_and_moves_on(
    timed_url: str,  # noqa: F811
    tmp_path: Path,
    admin_conn: AdminConn,
) -> None:
    user, session, extractor = uuid4(), f"s-{uuid4()}", Extractor()
    journal = WriteJournal(tmp_path / "j" / "writes.jsonl")
    store = ResilientStore(await timed_store(timed_url), journal, background=False)
    settings = MemorySettings(data_dir=tmp_path, embedding_model="none", background_extraction=False)
    async with MemoryManager.open(settings, store=store, extractor=LLMExtractor(FunctionModel(extractor))) as memory:
        await say(memory, session, user, "prefiero latón y que lo entreguen despacio")
        run = await memory.extract_if_due(session, user)
        assert run.set_aside == 1
        assert "statement_timeout" in (run.error or "")
        assert [f.content for f in run.stored] == ["Prefiere latón"]
        assert memory.stats.extraction_facts_set_aside == 1

        # The next trigger extracts only the new message: the one over the limit is not retried forever.
        await say(memory, session, user, "prefiero bronce")
        again = await memory.extract_if_due(session, user)
        assert (again.error, again.set_aside) == (None, 0)
        assert "despacio" not in extractor.prompts[-1]
        assert "bronce" in extractor.prompts[-1]
        status = await memory.backend_status()
        assert (status.backend, status.journal_length) == ("postgres", 0)  # a limit is not an outage
    assert contents(admin_conn, user) == {"Prefiere latón", "Prefiere bronce"}


async def test_a_background_job_over_the_timeout_dies_at_once_with_the_reason_and_the_session_goes_on(
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
        # Dead at its first attempt (a retry would fail the same way, and wait 30 s of backoff first).
        assert (queue.dead, queue.retrying, queue.failed_attempts) == (1, 0, 1)
        assert memory.stats.extraction_facts_set_aside == 1

        await say(memory, session, user, "prefiero titanio")
        assert (await memory.schedule_extraction(session, user)).outcome == "queued"
        assert await memory.flush(timeout=60)
        assert "despacio" not in extractor.prompts[-1]
    assert contents(admin_conn, user) == {"Prefiere latón", "Prefiere titanio"}
