"""Context receipts kept in Postgres (`memory_private.memory_receipts`): a turn's receipt is stored after the
turn and read back by another process (a new manager, the REST API); the owner reads their own only (row-level
security); the database keeps the newest 100 per user, also under concurrent writers; a deleted fact leaves
no text in a receipt."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import MemoryCapability, MemoryDeps, MemoryManager, MemorySettings
from memory_plugin.context.budget import ContextReport
from memory_plugin.context.receipt import ContextReceipt, ReceiptFact
from memory_plugin.context.receipt_store import RECEIPTS_KEPT, add_receipt, read_receipts, receipt_document
from memory_plugin.models import MemorizedFact, MemoryUpdate

Conn = psycopg.Connection[tuple[Any, ...]]


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("De acuerdo.")])


def a_receipt(user: UUID, session: str = "s-1", facts: tuple[ReceiptFact, ...] = ()) -> ContextReceipt:
    return ContextReceipt(
        session_id=session, user_id=user, at=datetime.now(UTC), report=ContextReport(budget=2000, counter="chars"),
        injected=facts, in_slots=(), cut=(), standing_tokens=10, turn_tokens=5, messages_kept=2,
        messages_dropped=0, summary_cut=False,
    )  # fmt: skip


async def test_a_turns_receipt_is_read_back_by_another_manager(pg_settings: MemorySettings) -> None:
    user = uuid4()
    fact = MemorizedFact(
        content="Las hélices de carbono llegaron con rebabas", category="feedback", confidence=0.9, source="explicit"
    )
    async with MemoryManager.open(pg_settings) as memory:
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact]))
        agent = Agent(FunctionModel(answer), deps_type=MemoryDeps, capabilities=[MemoryCapability(memory)])
        deps = MemoryDeps(session_id=f"s-{uuid4()}", user_id=user)
        await agent.run("¿Cómo vinieron las hélices de carbono?", deps=deps)
        assert await memory.flush()
        assert deps.receipt is not None
        built = deps.receipt
    async with MemoryManager.open(pg_settings) as restarted:  # another process: nothing in its RAM
        assert restarted.last_receipt(deps.session_id, user) is None
        [stored] = await restarted.receipts(user)
        assert await restarted.receipts(uuid4()) == []
    receipt = stored.receipt
    assert receipt.session_id == deps.session_id
    assert receipt.at == built.at
    assert [f.content for f in receipt.injected] == [f.content for f in built.injected]
    [shown] = [f for f in receipt.injected if "rebabas" in f.content]
    assert shown.reason == "search"
    assert shown.score is not None
    assert shown.components
    assert receipt.tokens == built.tokens


async def test_the_owner_reads_their_receipts_only(database_url: str, admin_conn: Conn) -> None:
    a, b = uuid4(), uuid4()
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False) as pool:
        await add_receipt(pool, b, a_receipt(b, "secreto-de-b"))
        [b_receipt] = await read_receipts(pool, b)
        assert await read_receipts(pool, a) == []
        assert await read_receipts(pool, a, receipt_id=b_receipt.id) == []
    with psycopg.connect(database_url) as conn:
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute("select set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": str(a)}),))
        assert conn.execute("select * from memory_private.memory_receipts where user_id = %s", (b,)).fetchall() == []
        assert conn.execute("delete from memory_private.memory_receipts where user_id = %s", (b,)).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "insert into memory_private.memory_receipts (user_id, session_id, receipt) values (%s, 'x', '{}')",
                (b,),
            )
    count = admin_conn.execute("select count(*) from memory_private.memory_receipts where user_id = %s", (b,))
    assert count.fetchone() == (1,)


async def test_the_database_keeps_the_newest_receipts_of_each_user_under_concurrent_writers(database_url: str) -> None:
    user, other = uuid4(), uuid4()
    async with AsyncConnectionPool(database_url, min_size=1, max_size=6, open=False) as pool:
        await add_receipt(pool, other, a_receipt(other))
        for n in range(RECEIPTS_KEPT - 10):
            await add_receipt(pool, user, a_receipt(user, f"s-{n}"))
        await asyncio.gather(*(add_receipt(pool, user, a_receipt(user, f"c-{n}")) for n in range(30)))
        kept = await read_receipts(pool, user, limit=1000)
        assert len(kept) == RECEIPTS_KEPT
        assert {r.receipt.session_id for r in kept} >= {f"c-{n}" for n in range(30)}, "the newest are kept"
        assert "s-0" not in {r.receipt.session_id for r in kept}
        assert len(await read_receipts(pool, other)) == 1


async def test_a_deleted_fact_leaves_no_text_in_a_receipt(pg_memory: MemoryManager, database_url: str) -> None:
    user = uuid4()
    stored_facts = await pg_memory.update_memory(
        MemoryUpdate(
            user_id=user,
            new_facts=[
                MemorizedFact(content="Usa tornillos M6", category="fact", confidence=0.9, source="explicit"),
                MemorizedFact(content="Vive en Zaragoza", category="fact", confidence=0.9, source="explicit"),
            ],
        )
    )
    kept, gone = sorted(stored_facts, key=lambda f: "Zaragoza" in f.content)
    facts = tuple(ReceiptFact(f.id, f.content, f.category, "ranked", 4) for f in (kept, gone))
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False) as pool:
        await add_receipt(pool, user, a_receipt(user, facts=facts))
        assert "Zaragoza" not in json.dumps(receipt_document(a_receipt(user, facts=facts)))
        await pg_memory.forget(user, gone.id)
        [stored] = await read_receipts(pool, user)
    assert [(f.id, f.content) for f in stored.receipt.injected] == [(kept.id, "Usa tornillos M6"), (gone.id, "")]


async def test_a_receipt_a_user_wrote_by_hand_reads_without_error(database_url: str) -> None:
    user = uuid4()
    with psycopg.connect(database_url) as conn:
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute("select set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": str(user)}),))
        conn.execute(
            "insert into memory_private.memory_receipts (user_id, session_id, receipt) values (%s, 's', %s)",
            (user, json.dumps({"report": [], "injected": [{"id": "nope"}, 7, {"id": str(uuid4()), "score": "x"}]})),
        )
        conn.commit()
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False) as pool:
        [stored] = await read_receipts(pool, user)
    assert [(f.content, f.score) for f in stored.receipt.injected] == [("", None)]
