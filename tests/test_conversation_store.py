"""pydantic-ai's `ConversationStore` on Postgres (`PostgresConversationStore`).

The contract tests run each behaviour against pydantic-ai's own `InMemoryConversationStore` and ours: the
Postgres backend must answer exactly as the reference does (loads, appends, branches, forks, scopes, revision
conflicts, limits, deletes). Then what only the database gives: an agent resuming a conversation in another OS
process, and another user (RLS, the role and JWT claims PostgREST sets) seeing nothing of it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationStore, InMemoryConversationStore
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    BinaryImage,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import DeferredToolRequests

from memory_plugin.chats.conversations import PostgresConversationStore
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.errors import InvalidMemoryInputError

ROOT = Path(__file__).resolve().parents[1]
Pool = AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]


@pytest_asyncio.fixture(loop_scope="session")
async def pool(database_url: str) -> AsyncIterator[Pool]:
    p: Pool = AsyncConnectionPool(
        database_url, min_size=1, max_size=8, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await p.open(wait=True)
    yield p
    await p.close()


@pytest_asyncio.fixture(loop_scope="session", params=["pydantic-ai in-memory", "postgres"])
async def store(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[ConversationStore]:
    """The reference store, then ours for a fresh user."""
    if request.param == "pydantic-ai in-memory":
        yield InMemoryConversationStore()
        return
    p: Pool = AsyncConnectionPool(
        database_url, min_size=1, max_size=8, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await p.open(wait=True)
    yield PostgresConversationStore(p, uuid4())
    await p.close()


def echo_model() -> FunctionModel:
    """A model that says how many messages it was sent and repeats the last prompt."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        prompt = next((p.content for p in last.parts if isinstance(p, UserPromptPart)), "")
        return ModelResponse(parts=[TextPart(f"{len(messages)} seen; you said {prompt}")])

    return FunctionModel(reply)


AGENT = Agent(echo_model())


async def turn(store: ConversationStore, conversation_id: str, prompt: str, *, scope: str | None = None) -> str:
    """One turn of the agent on the stored conversation (loaded, run, saved); the model's answer."""
    conversation = await store.load(conversation_id, scope=scope) or Conversation(conversation_id=conversation_id)
    result = await AGENT.run(prompt, conversation=conversation)
    await store.save(result, scope=scope)
    return result.output


def texts(conversation: Conversation) -> list[str]:
    """Each message's text (prompt or answer), in order."""
    out: list[str] = []
    for message in conversation.messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart | TextPart) and isinstance(part.content, str):
                out.append(part.content)
    return out


# --- the contract, against pydantic-ai's reference store and ours ------------------------------------------------


async def test_an_unknown_conversation_loads_as_none(store: ConversationStore) -> None:
    assert await store.load("nope") is None
    assert await store.load_entries("nope") is None
    assert await store.list_conversations() == []


async def test_turns_are_saved_and_loaded_with_usage_and_revision(store: ConversationStore) -> None:
    assert await turn(store, "c1", "hola") == "1 seen; you said hola"
    assert await turn(store, "c1", "otra vez") == "3 seen; you said otra vez"  # the model saw the first turn
    loaded = await store.load("c1")
    assert loaded is not None
    assert texts(loaded) == ["hola", "1 seen; you said hola", "otra vez", "3 seen; you said otra vez"]
    assert loaded.usage.requests == 2
    assert loaded.new_message_index == 4
    record = (await store.list_conversations())[0]
    assert (record.conversation_id, record.revision) == ("c1", loaded.revision)


async def test_a_save_appends_only_the_new_messages(store: ConversationStore) -> None:
    await turn(store, "c1", "uno")
    loaded = await store.load("c1")
    assert loaded is not None
    result = await AGENT.run("dos", conversation=loaded)
    entries = await store.save(result)
    assert [e.message for e in entries] == result.new_messages()
    assert len(await store.load_entries("c1") or []) == 4
    # Saving again with nothing new stores nothing and still advances the revision.
    assert await store.save(result) == []


async def test_a_stale_revision_is_a_conflict_and_changes_nothing(store: ConversationStore) -> None:
    await turn(store, "c1", "uno")
    first = await store.load("c1")
    second = await store.load("c1")
    assert first is not None
    assert second is not None
    await store.save(await AGENT.run("desde el primero", conversation=first))
    with pytest.raises(ConversationConflict):
        await store.save(await AGENT.run("desde el segundo", conversation=second))
    stored = await store.load("c1")
    assert stored is not None
    assert "desde el segundo" not in texts(stored)
    assert "desde el primero" in texts(stored)
    # A conversation not loaded from the store cannot overwrite one of the same id.
    with pytest.raises(ConversationConflict):
        await store.save(Conversation(conversation_id="c1", messages=list(stored.messages)))


async def test_concurrent_saves_from_one_revision_store_exactly_one(store: ConversationStore) -> None:
    await turn(store, "c1", "uno")
    loaded = [await store.load("c1") for _ in range(6)]
    results = [await AGENT.run(f"rama {i}", conversation=c) for i, c in enumerate(loaded) if c is not None]
    outcomes = await asyncio.gather(*(store.save(r) for r in results), return_exceptions=True)
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, ConversationConflict) for o in outcomes if isinstance(o, BaseException))
    assert len(await store.load_entries("c1") or []) == 4


async def test_load_with_a_limit_gives_the_last_messages(store: ConversationStore) -> None:
    for prompt in ("uno", "dos", "tres"):
        await turn(store, "c1", prompt)
    window = await store.load("c1", limit=3)
    assert window is not None
    assert texts(window) == ["3 seen; you said dos", "tres", "5 seen; you said tres"]
    assert await store.load("c1", limit=0) is not None
    assert (await store.load_entries("c1", limit=0)) == []
    assert len(await store.load_entries("c1", limit=100) or []) == 6
    with pytest.raises(UserError):
        await store.load("c1", limit=-1)
    # Saving after a windowed load still appends to the whole conversation.
    await store.save(await AGENT.run("cuatro", conversation=window))
    assert len(await store.load_entries("c1") or []) == 8


async def test_a_rewritten_history_branches_and_keeps_the_old_one(store: ConversationStore) -> None:
    for prompt in ("uno", "dos"):
        await turn(store, "c1", prompt)
    loaded = await store.load("c1")
    assert loaded is not None
    old_tip = (await store.load_entries("c1") or [])[-1].id
    # A history edited by hand (its second turn replaced): compared with the stored one, it branches.
    edited = Conversation(
        conversation_id="c1",
        messages=[*loaded.messages[:2], ModelRequest(parts=[UserPromptPart("dos, corregido")])],
        revision=loaded.revision,
    )
    await store.save(edited)
    record = (await store.list_conversations())[0]
    assert record.branches == [old_tip]
    now = await store.load("c1")
    assert now is not None
    assert texts(now) == ["uno", "1 seen; you said uno", "dos, corregido"]
    edited_tip = (await store.load_entries("c1") or [])[-1].id
    # Back to the branch it left, by its tip: the edited history is now the one left.
    back = await store.branch("c1", from_entry=old_tip, expected_revision=now.revision)
    assert texts(back)[-1] == "3 seen; you said dos"
    assert (await store.list_conversations())[0].branches == [edited_tip]


async def test_branch_at_an_earlier_turn_then_continue(store: ConversationStore) -> None:
    for prompt in ("uno", "dos"):
        await turn(store, "c1", prompt)
    loaded = await store.load("c1")
    assert loaded is not None
    tip = (await store.load_entries("c1") or [])[-1].id
    branched = await store.branch("c1", at=2, expected_revision=loaded.revision)
    assert texts(branched) == ["uno", "1 seen; you said uno"]
    await store.save(await AGENT.run("otra pregunta", conversation=branched))
    now = await store.load("c1")
    assert now is not None
    assert texts(now)[2:] == ["otra pregunta", "3 seen; you said otra pregunta"]
    assert (await store.list_conversations())[0].branches == [tip]
    with pytest.raises(ConversationConflict):  # the revision `loaded` had is gone
        await store.branch("c1", at=0, expected_revision=loaded.revision)
    with pytest.raises(UserError):
        await store.branch("c1", at=99, expected_revision=now.revision)
    with pytest.raises(UserError):
        await store.branch("c1", from_entry="not-an-entry", expected_revision=now.revision)


async def test_a_fork_shares_the_history_and_survives_the_original(store: ConversationStore) -> None:
    for prompt in ("uno", "dos"):
        await turn(store, "c1", prompt)
    fork = await store.fork("c1", at=2, new_conversation_id="f1")
    assert texts(fork) == ["uno", "1 seen; you said uno"]
    record = next(r for r in await store.list_conversations() if r.conversation_id == "f1")
    entries = await store.load_entries("c1") or []
    assert (record.forked_from, record.forked_at) == ("c1", entries[1].id)
    await store.save(await AGENT.run("por el fork", conversation=fork))
    original = await store.load("c1")
    assert original is not None
    assert len(original.messages) == 4  # the fork's turn is not the original's
    with pytest.raises(ConversationConflict):
        await store.fork("c1", new_conversation_id="f1")  # the id is taken
    await store.delete("c1")
    assert await store.load("c1") is None
    kept = await store.load("f1")
    assert kept is not None
    assert texts(kept) == ["uno", "1 seen; you said uno", "por el fork", "3 seen; you said por el fork"]


async def test_scopes_keep_conversations_to_their_owner(store: ConversationStore) -> None:
    await turn(store, "c1", "de ana", scope="ana")
    await turn(store, "c2", "de luis", scope="luis")
    assert await store.load("c1", scope="luis") is None
    assert await store.load("c1", scope="ana") is not None
    assert [r.conversation_id for r in await store.list_conversations(scope="ana")] == ["c1"]
    loaded = await store.load("c1")
    assert loaded is not None
    with pytest.raises(ConversationConflict):
        await store.save(await AGENT.run("como luis", conversation=loaded), scope="luis")
    await store.delete("c1", scope="luis")  # another scope: left as it is
    assert await store.load("c1") is not None
    await store.delete("c1", scope="ana")
    assert await store.load("c1") is None


async def test_list_is_most_recent_first_and_limited(store: ConversationStore) -> None:
    for cid in ("a", "b", "c"):
        await turn(store, cid, f"hola {cid}")
    await turn(store, "a", "de nuevo")
    assert [r.conversation_id for r in await store.list_conversations()] == ["a", "c", "b"]
    assert [r.conversation_id for r in await store.list_conversations(limit=2)] == ["a", "c"]
    with pytest.raises(UserError):
        await store.list_conversations(limit=-1)


async def test_files_and_deferred_tool_calls_round_trip(store: ConversationStore) -> None:
    # `BinaryImage`: what pydantic-ai's message JSON reads an image back as (a `BinaryContent` image comes back
    # as one, in any store that serialises).
    image = BinaryImage(data=b"\x89PNG\r\n\x1a\n\x00\x01", media_type="image/png")
    agent = Agent(TestModel(), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def cancel_order(order: str) -> str:
        """Cancel an order."""
        return f"cancelled {order}"

    result = await agent.run(["Cancela el pedido", image], conversation=Conversation(conversation_id="c1"))
    assert isinstance(result.output, DeferredToolRequests)
    await store.save(result)
    loaded = await store.load("c1")
    assert loaded is not None
    assert loaded.messages == result.all_messages()  # bytes included
    assert loaded.deferred_tool_requests == result.output
    # Compared message by message (no `new_message_index`): equal after the round trip, so nothing branches.
    again = Conversation(conversation_id="c1", messages=list(loaded.messages), revision=loaded.revision)
    assert await store.save(again) == []
    assert (await store.list_conversations())[0].branches == []


async def test_delete_is_idempotent_and_an_id_can_be_reused(store: ConversationStore) -> None:
    await turn(store, "c1", "uno")
    old = await store.load("c1")
    assert old is not None
    await store.delete("c1")
    await store.delete("c1")
    assert await store.load("c1") is None
    with pytest.raises(ConversationConflict):  # a copy loaded before the delete cannot be saved over it
        await store.save(await AGENT.run("tarde", conversation=old))
    assert await turn(store, "c1", "nuevo") == "1 seen; you said nuevo"


# --- Postgres: resuming elsewhere, tenant isolation, what a delete releases, messy input --------------------------

RESUME = """
import asyncio, sys
from uuid import UUID
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel
from memory_plugin.chats.conversations import PostgresConversationStore
from memory_plugin.database.admin import MemoryAdmin

def reply(messages, info):
    prompts = [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
    return ModelResponse(parts=[TextPart(" | ".join(prompts))])

async def main(url, user, conversation_id):
    async with AsyncConnectionPool(url, kwargs={"autocommit": True, "row_factory": dict_row}) as pool:
        store = PostgresConversationStore(pool, UUID(user))
        conversation = await store.load(conversation_id)
        assert conversation is not None, "the conversation is not in the store"
        result = await Agent(FunctionModel(reply)).run("¿y el plazo?", conversation=conversation)
        await store.save(result)
        print(result.output)

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.slow
async def test_an_agent_resumes_the_conversation_in_another_process(pool: Pool, database_url: str) -> None:
    user = uuid4()
    await turn(PostgresConversationStore(pool, user), "pedido-7", "40 soportes anodizados")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", RESUME, database_url, str(user), "pedido-7"]
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    # The other process's model was sent the first turn, from the store.
    assert done.stdout.strip() == "40 soportes anodizados | ¿y el plazo?"
    loaded = await PostgresConversationStore(pool, user).load("pedido-7")
    assert loaded is not None
    assert texts(loaded) == [
        "40 soportes anodizados", "1 seen; you said 40 soportes anodizados",
        "¿y el plazo?", "40 soportes anodizados | ¿y el plazo?",
    ]  # fmt: skip


async def test_a_new_store_on_a_new_pool_continues_where_the_last_one_stopped(database_url: str) -> None:
    user = uuid4()
    for prompt in ("uno", "dos"):
        async with AsyncConnectionPool(
            database_url, min_size=1, kwargs={"autocommit": True, "row_factory": dict_row}
        ) as fresh:
            await turn(PostgresConversationStore(fresh, user), "c1", prompt)
    async with AsyncConnectionPool(database_url, min_size=1, kwargs={"autocommit": True, "row_factory": dict_row}) as p:
        loaded = await PostgresConversationStore(p, user).load("c1")
    assert loaded is not None
    assert texts(loaded) == ["uno", "1 seen; you said uno", "dos", "3 seen; you said dos"]


def _rows(admin_conn: psycopg.Connection[tuple[Any, ...]], user: UUID) -> list[str]:
    """Every row of `user` in both tables, as text."""
    return [
        r[0]
        for table in ("conversations", "conversation_entries")
        for r in admin_conn.execute(
            f"select t::text from public.{table} t where t.user_id = %s order by 1", (user,)
        ).fetchall()
    ]


async def test_another_user_reaches_nothing_of_a_conversation(
    pool: Pool, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    alice, bob = uuid4(), uuid4()
    mine, theirs = PostgresConversationStore(pool, alice), PostgresConversationStore(pool, bob)
    await turn(mine, "c1", "mi pedido secreto")
    entries = await mine.load_entries("c1") or []
    before = _rows(admin_conn, alice)
    assert before
    assert await theirs.load("c1") is None
    assert await theirs.list_conversations() == []
    with pytest.raises(KeyError):
        await theirs.read_entry(entries[0].id)
    with pytest.raises(UserError):
        await theirs.fork("c1", new_conversation_id="robado")
    with pytest.raises(UserError):  # naming Alice's entry in a fork of his own finds nothing either
        await theirs.fork("c1", from_entry=entries[-1].id)
    await theirs.delete("c1")
    # Bob's conversation of the same id is his own: no conflict, no trace of Alice's.
    assert await turn(theirs, "c1", "el mío") == "1 seen; you said el mío"
    assert _rows(admin_conn, alice) == before
    # The database itself, as PostgREST runs Bob's requests (role `authenticated`, Bob's claims): nothing.
    with psycopg.connect(admin_conn.info.dsn) as conn:
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute(
            "select set_config('request.jwt.claims', %s, true)",
            (json.dumps({"sub": str(bob), "role": "authenticated"}),),
        )
        users = conn.execute(
            "select user_id from public.conversations union all select user_id from public.conversation_entries"
        ).fetchall()
        assert users
        assert {u for (u,) in users} == {bob}
        assert conn.execute("delete from public.conversation_entries where user_id = %s", (alice,)).rowcount == 0
        conn.rollback()
    assert _rows(admin_conn, alice) == before


async def test_a_delete_releases_the_entries_no_fork_shares(
    pool: Pool, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    user = uuid4()
    store = PostgresConversationStore(pool, user)

    def stored_entries() -> int:
        row = admin_conn.execute("select count(*) from public.conversation_entries where user_id = %s", (user,))
        return int(row.fetchone()[0])  # type: ignore[index]

    for prompt in ("uno", "dos"):
        await turn(store, "c1", prompt)
    await turn(store, "c2", "otra")
    await store.fork("c1", at=2, new_conversation_id="f1")
    assert stored_entries() == 6
    await store.delete("c1")
    assert stored_entries() == 4  # c1's last two went; the two the fork shares stay, and c2's
    await store.delete("f1")
    await store.delete("c2")
    assert stored_entries() == 0


async def test_unstorable_input_is_refused_and_loses_nothing(pool: Pool) -> None:
    store = PostgresConversationStore(pool, uuid4())
    await turn(store, "c1", "uno")
    loaded = await store.load("c1")
    assert loaded is not None
    result = await AGENT.run("con un \x00 dentro", conversation=loaded)
    with pytest.raises(InvalidMemoryInputError, match="NUL"):
        await store.save(result)
    with pytest.raises(InvalidMemoryInputError, match="500"):
        await turn(store, "x" * 501, "hola")
    stored = await store.load("c1")
    assert stored is not None
    assert texts(stored) == ["uno", "1 seen; you said uno"]
    assert await store.save(await AGENT.run("sin nada raro", conversation=stored)) != []


async def test_forks_racing_a_delete_never_point_at_released_messages(pool: Pool) -> None:
    """Each fork either lands before the delete (and keeps the messages it shares) or is refused after it."""
    store = PostgresConversationStore(pool, uuid4())
    for prompt in ("uno", "dos"):
        await turn(store, "c1", prompt)
    forks = [store.fork("c1", new_conversation_id=f"f{i}") for i in range(8)]
    outcomes = await asyncio.gather(store.delete("c1"), *forks, return_exceptions=True)
    landed = [o for o in outcomes[1:] if isinstance(o, Conversation)]
    assert all(isinstance(o, UserError) for o in outcomes[1:] if not isinstance(o, Conversation))
    for fork in landed:
        loaded = await store.load(fork.conversation_id)
        assert loaded is not None
        assert texts(loaded) == ["uno", "1 seen; you said uno", "dos", "3 seen; you said dos"]
    assert {r.conversation_id for r in await store.list_conversations()} == {f.conversation_id for f in landed}


async def test_erasing_a_user_erases_their_conversations(
    pool: Pool, database_url: str, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    user, other = uuid4(), uuid4()
    for prompt in ("uno", "dos"):
        await turn(PostgresConversationStore(pool, user), "c1", prompt)
    await PostgresConversationStore(pool, user).fork("c1", at=2, new_conversation_id="f1")
    await turn(PostgresConversationStore(pool, other), "c1", "de otro")
    kept = _rows(admin_conn, other)
    async with await MemoryAdmin.connect(database_url) as admin:
        assert await admin.erase_user(user) >= 6  # 2 records and 4 entries, besides anything else of theirs
    assert _rows(admin_conn, user) == []
    assert _rows(admin_conn, other) == kept
