"""Idempotent creates: `POST /api/chats` retried with its `Idempotency-Key` makes one chat, whatever failed.

- Through the REST API on the session's embedded PostgreSQL: the same key twice makes one chat (201 both times,
  the same id); the same key with another body is 422 `idempotency_key_reused`; no key makes a chat every time;
  another user's same key is another chat; a deleted chat's key is free again.
- Through `ChatService.create(idempotency_key=...)` on Postgres and in RAM: the same rules.
- For real: the database is stopped right after the create committed (while the chat is summarised), the client
  gets 503, the server comes back, and the retry with the same key leaves one chat holding each turn once.
- The database refuses a create for another user with that user's key (no "this key exists" answer).
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID, uuid4

import httpx
import psycopg
import pytest

from memory_plugin import IdempotencyKeyReusedError
from memory_plugin.chats import ChatService, PostgresChatStore
from tests.chat_helpers import word_embedder
from tests.test_api import auth, turns
from tests.test_chat_idempotency import (  # noqa: F401 - fixtures
    Pool,
    Server,
    StopsTheDatabase,
    chats,
    client,
    client_for,
    contents,
    open_pool,
    pool,
    said,
    server,
    store_kind,
)
from tests.test_cross_tenant import acting_as

pytestmark = pytest.mark.asyncio(loop_scope="session")


def chat_count(admin_conn: psycopg.Connection[Any], user: UUID) -> int:
    found = admin_conn.execute("select count(*) from public.chats where user_id = %s", (user,)).fetchone()
    return int(found[0]) if found else 0


async def test_the_same_key_twice_creates_one_chat_and_another_body_with_it_is_422(
    client: httpx.AsyncClient,  # noqa: F811
    admin_conn: psycopg.Connection[Any],
) -> None:
    user = uuid4()
    body = {"title": "Bridas", "turns": turns(1, "bridas")}
    headers = {**auth(user), "Idempotency-Key": "create-1"}
    first = await client.post("/api/chats", json=body, headers=headers)
    again = await client.post("/api/chats", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json()["id"] == again.json()["id"]
    assert contents(again.json()["full_history"]) == ["¿bridas 0?", "bridas 0."]
    assert chat_count(admin_conn, user) == 1

    other = await client.post("/api/chats", json={"title": "Otra"}, headers=headers)
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert chat_count(admin_conn, user) == 1
    # Without a key every POST creates; another user's same key is that user's own chat.
    await client.post("/api/chats", json=body, headers=auth(user))
    assert chat_count(admin_conn, user) == 2
    stranger = await client.post("/api/chats", json=body, headers={**auth(uuid4()), "Idempotency-Key": "create-1"})
    assert stranger.status_code == 201
    assert stranger.json()["id"] != first.json()["id"]
    # A deleted chat's key makes a new chat.
    assert (await client.delete(f"/api/chats/{first.json()['id']}", headers=auth(user))).status_code == 204
    renewed = await client.post("/api/chats", json=body, headers=headers)
    assert renewed.status_code == 201
    assert renewed.json()["id"] != first.json()["id"]


async def test_a_retry_at_the_chat_limit_returns_the_chat_it_made(
    client: httpx.AsyncClient,  # noqa: F811
    admin_conn: psycopg.Connection[Any],
) -> None:
    user = uuid4()
    admin_conn.execute(
        "insert into memory_private.memory_limits (name, user_id, value) values ('chats_per_user', %s, 1)", (user,)
    )
    headers = {**auth(user), "Idempotency-Key": "only-one"}
    first = await client.post("/api/chats", json={"title": "Única"}, headers=headers)
    again = await client.post("/api/chats", json={"title": "Única"}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)  # a retry is not a second chat: not over the limit
    assert first.json()["id"] == again.json()["id"]
    over = await client.post("/api/chats", json={"title": "Otra"}, headers={**auth(user), "Idempotency-Key": "two"})
    assert over.status_code == 429
    assert chat_count(admin_conn, user) == 1


async def test_the_create_key_header_is_in_the_openapi_schema(client: httpx.AsyncClient) -> None:  # noqa: F811
    schema = (await client.get("/openapi.json")).json()
    params = schema["paths"]["/api/chats"]["post"]["parameters"]
    (header,) = [p for p in params if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key"
    assert "one chat" in header["description"]


async def test_the_python_create_makes_one_chat_per_key(chats: ChatService) -> None:  # noqa: F811
    user = uuid4()
    messages = said("latón")
    first = await chats.create(user, title="Latón", turns=messages, idempotency_key="c1")
    again = await chats.create(user, title="Latón", turns=messages, idempotency_key="c1")
    assert first.id == again.id
    assert again.turn_count == 2
    with pytest.raises(IdempotencyKeyReusedError):
        await chats.create(user, title="Titanio", turns=messages, idempotency_key="c1")
    rows, total = await chats.list_chats(user)
    assert (total, [r.id for r in rows]) == (1, [first.id])


async def test_a_create_for_another_user_with_their_key_is_refused_not_answered(
    database_url: str, admin_conn: psycopg.Connection[Any]
) -> None:
    a, b = uuid4(), uuid4()
    admin_conn.execute(
        "insert into public.chats (user_id, title, create_key, create_hash) values (%s, 'de B', 'k', 'h')", (b,)
    )
    with psycopg.connect(database_url) as conn:
        for key in ("k", "k-new"):  # B's key, and one B never used: the same refusal, so nothing tells them apart
            with acting_as(conn, "authenticated", a), pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select * from public.chat_create(%s, 'x', '[]'::jsonb, %s, 'h')", (b, key))
    assert chat_count(admin_conn, b) == 1


@pytest.mark.slow
async def test_a_create_retried_after_a_503_from_a_failure_after_the_commit_makes_one_chat(
    server: Server,  # noqa: F811
) -> None:
    user = uuid4()
    await server.migrate()
    pool = await open_pool(server.url)  # noqa: F811
    summarizer = StopsTheDatabase(server)
    body = {"turns": turns(1, "anodizado")}
    headers = {**auth(user), "Idempotency-Key": str(uuid4())}
    try:
        async with client_for(ChatService(PostgresChatStore(pool), word_embedder(), summarizer)) as client:
            summarizer.armed = True
            failed = await client.post("/api/chats", json=body, headers=headers)
            assert failed.status_code == 503
            assert failed.json()["error"]["code"] == "database_unavailable"

            await asyncio.to_thread(server.start)
            answer = failed
            for _ in range(50):  # "retry shortly": the pool replaces its broken connections as they are used
                answer = await client.post("/api/chats", json=body, headers=headers)
                if answer.status_code != 503:
                    break
                await asyncio.sleep(0.2)
            assert answer.status_code == 201, answer.text
            assert contents(answer.json()["full_history"]) == ["¿anodizado 0?", "anodizado 0."]
            assert answer.json()["summary_text"]  # what the failed attempt did not finish, the retry did
    finally:
        await pool.close()
    with psycopg.connect(server.url) as conn:
        stored = conn.execute("select full_history from public.chats where user_id = %s", (user,)).fetchall()
    assert [contents(row[0]) for row in stored] == [["¿anodizado 0?", "anodizado 0."]]
