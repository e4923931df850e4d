"""The REST API end to end over real HTTP (uvicorn on 127.0.0.1, a free port) against the embedded Postgres:
chats created, listed, searched, appended with compaction and deleted; the user's memory read; and every
unauthorized case (no token, bad signature, expired, not a user, someone else's chat) answered with no data."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID, uuid4

import httpx
import jwt
import psycopg
import pytest
import pytest_asyncio
import uvicorn
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import AuthenticationError, TokenVerifier
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.models import MemorizedFact
from memory_plugin.settings import MemorySettings
from memory_plugin.store.postgres import PostgresStore
from memory_plugin.write.items import items_from_update
from tests.chat_helpers import word_embedder

SECRET = "test-secret-with-at-least-32-bytes-of-entropy!"
MAX_BODY = 200_000


def token(
    user: UUID | str,
    *,
    secret: str = SECRET,
    role: str = "authenticated",
    expires_in: float = 600,
    audience: str | None = "authenticated",
) -> str:
    claims: dict[str, Any] = {"sub": str(user), "role": role, "exp": int(time.time() + expires_in)}
    if audience is not None:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm="HS256")


def auth(user: UUID) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user)}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def api(database_url: str) -> AsyncIterator[str]:
    """The API's base URL, served by uvicorn in this event loop."""
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=8, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    services = ApiServices(
        chats=ChatService(PostgresChatStore(pool), word_embedder()),
        verifier=TokenVerifier(secret=SECRET),
        memory=PostgresStore(pool),
    )
    port = free_port()
    config = uvicorn.Config(
        create_app(services, max_body_bytes=MAX_BODY), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(1500):  # up to 30 s on a loaded machine
        if server.started or task.done():
            break
        await asyncio.sleep(0.02)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task
    await pool.close()


@pytest_asyncio.fixture(loop_scope="session")
async def client(api: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api, timeout=30) as c:
        yield c


def turns(pairs: int, topic: str) -> list[dict[str, str]]:
    out = []
    for i in range(pairs):
        out += [{"role": "user", "content": f"¿{topic} {i}?"}, {"role": "assistant", "content": f"{topic} {i}."}]
    return out


async def test_create_read_append_with_compaction_and_delete(client: httpx.AsyncClient) -> None:
    user = uuid4()
    created = await client.post("/api/chats", json={"turns": turns(2, "soportes anodizados")}, headers=auth(user))
    assert created.status_code == 201
    chat = created.json()
    chat_id = chat["id"]
    assert chat["turn_count"] == 4
    assert chat["full_history"][0]["parts"][0]["content"] == "¿soportes anodizados 0?"

    patched = await client.patch(
        f"/api/chats/{chat_id}", json={"turns": turns(14, "soportes anodizados")}, headers=auth(user)
    )
    assert patched.status_code == 200
    body = patched.json()
    assert body["turn_count"] == 32
    assert len(body["appended"]) == 28  # what changed, not the whole chat
    assert "full_history" not in body
    assert "anodizados" in body["summary_text"]
    assert 11 <= body["assistant_turn_count"] <= 16
    whole = (await client.get(f"/api/chats/{chat_id}", headers=auth(user))).json()
    assert len(whole["full_history"]) == 32
    assert whole["assistant_history"][0]["parts"][0]["part_kind"] == "compaction"
    assert len(whole["assistant_history"]) == body["assistant_turn_count"]

    one = await client.get("/api/chats", params={"id": chat_id}, headers=auth(user))
    assert one.status_code == 200
    assert one.json()["id"] == chat_id
    page = await client.get("/api/chats", params={"limit": 10}, headers=auth(user))
    assert [c["id"] for c in page.json()["items"]] == [chat_id]
    assert page.json()["total"] == 1

    assert (await client.delete(f"/api/chats/{chat_id}", headers=auth(user))).status_code == 204
    gone = await client.get(f"/api/chats/{chat_id}", headers=auth(user))
    assert gone.status_code == 404
    assert gone.json() == {"error": {"code": "chat_not_found", "message": "no such chat"}}


async def test_pydantic_ai_messages_are_accepted_as_turns(client: httpx.AsyncClient) -> None:
    user = uuid4()
    created = await client.post("/api/chats", json={"title": "Stock"}, headers=auth(user))
    chat_id = created.json()["id"]
    call = {"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": "stock", "args": {"item": "M8"},
                                           "tool_call_id": "c1"}]}  # fmt: skip
    result = {"kind": "request", "parts": [{"part_kind": "tool-return", "tool_name": "stock", "content": "12",
                                            "tool_call_id": "c1"}]}  # fmt: skip
    patched = await client.patch(f"/api/chats/{chat_id}", json={"turns": [call, result]}, headers=auth(user))
    assert patched.status_code == 200
    history = patched.json()["appended"]
    assert [m["parts"][0]["part_kind"] for m in history] == ["tool-call", "tool-return"]
    assert patched.json()["title"] == "Stock"


async def test_search_finds_the_chat_by_topic(client: httpx.AsyncClient) -> None:
    user = uuid4()
    ids = {}
    for topic in ("soportes anodizados", "bridas de acero inoxidable", "facturas pendientes de pago"):
        created = await client.post("/api/chats", json={"turns": turns(3, topic)}, headers=auth(user))
        ids[topic] = created.json()["id"]
    found = await client.get(
        "/api/chats", params={"search": "volvamos al chat de los soportes anodizados"}, headers=auth(user)
    )
    assert found.status_code == 200
    assert found.json()["chosen"]["id"] == ids["soportes anodizados"]
    other = await client.get("/api/chats", params={"search": "soportes anodizados"}, headers=auth(uuid4()))
    assert other.json() == {"chosen": None, "candidates": []}


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-jwt",
        f"Bearer {token(uuid4(), secret='another-secret-with-at-least-32-bytes!!')}",
        f"Bearer {token(uuid4(), expires_in=-3600)}",
        f"Bearer {token(uuid4(), role='anon')}",
        f"Bearer {token('not-a-uuid')}",
        # Signed with the right secret but for another service, or for no audience at all.
        f"Bearer {token(uuid4(), audience='another-service')}",
        f"Bearer {token(uuid4(), audience=None)}",
        "Bearer "
        + jwt.encode(
            {"sub": str(uuid4()), "role": "authenticated", "exp": int(time.time()) + 60}, "", algorithm="none"
        ),
    ],
)
async def test_requests_without_a_valid_user_token_get_401_and_no_data(
    client: httpx.AsyncClient, authorization: str | None
) -> None:
    owner = uuid4()
    chat_id = (await client.post("/api/chats", json={"turns": turns(1, "secreto")}, headers=auth(owner))).json()["id"]
    headers = {"Authorization": authorization} if authorization else {}
    for method, url, body in (
        ("GET", "/api/chats", None),
        ("GET", f"/api/chats/{chat_id}", None),
        ("POST", "/api/chats", {"title": "x"}),
        ("PATCH", f"/api/chats/{chat_id}", {"turns": turns(1, "intruso")}),
        ("DELETE", f"/api/chats/{chat_id}", None),
        ("GET", "/api/memory/records", None),
    ):
        response = await client.request(method, url, json=body, headers=headers)
        assert response.status_code == 401, (method, url)
        assert response.json()["error"]["code"] == "unauthorized"
        assert "secreto" not in response.text
    kept = await client.get(f"/api/chats/{chat_id}", headers=auth(owner))
    assert kept.json()["turn_count"] == 2


async def test_the_audience_is_configurable_and_always_checked() -> None:
    user = uuid4()
    own_api = TokenVerifier(secret=SECRET, audience="shop-api")
    assert await own_api.user_of(f"Bearer {token(user, audience='shop-api')}") == user
    for refused in ("authenticated", None):  # Supabase's default audience is not this API's, nor is none
        with pytest.raises(AuthenticationError, match=r"(?i)aud"):
            await own_api.user_of(f"Bearer {token(user, audience=refused)}")
    with pytest.raises(AuthenticationError, match="MEMORY_JWT_AUDIENCE"):
        TokenVerifier(secret=SECRET, audience="")
    assert MemorySettings().jwt_audience == "authenticated"


async def test_someone_elses_chat_is_404_and_unchanged(client: httpx.AsyncClient) -> None:
    owner, intruder = uuid4(), uuid4()
    chat_id = (await client.post("/api/chats", json={"turns": turns(1, "secreto")}, headers=auth(owner))).json()["id"]
    for method, url, params, body in (
        ("GET", "/api/chats", {"id": chat_id}, None),
        ("GET", f"/api/chats/{chat_id}", None, None),
        ("PATCH", f"/api/chats/{chat_id}", None, {"turns": turns(1, "intruso"), "title": "mío"}),
        ("DELETE", f"/api/chats/{chat_id}", None, None),
    ):
        response = await client.request(method, url, params=params, json=body, headers=auth(intruder))
        assert response.status_code == 404, (method, url)
        assert "secreto" not in response.text
    listed = await client.get("/api/chats", headers=auth(intruder))
    assert listed.json()["items"] == []
    kept = (await client.get(f"/api/chats/{chat_id}", headers=auth(owner))).json()
    assert kept["turn_count"] == 2
    assert kept["title"] != "mío"


async def test_bad_input_gets_typed_errors_and_changes_nothing(client: httpx.AsyncClient) -> None:
    user = uuid4()
    chat_id = (await client.post("/api/chats", json={"turns": turns(1, "base")}, headers=auth(user))).json()["id"]
    bad_turn = await client.patch(f"/api/chats/{chat_id}", json={"turns": [{"kind": "nonsense"}]}, headers=auth(user))
    assert bad_turn.status_code == 422
    assert bad_turn.json()["error"]["code"] == "invalid_turn"
    unknown = await client.post("/api/chats", json={"turns": [], "owner": str(uuid4())}, headers=auth(user))
    assert unknown.status_code == 422
    assert unknown.json()["error"]["code"] == "invalid_request"
    bad_id = await client.get("/api/chats/not-a-uuid", headers=auth(user))
    assert bad_id.status_code == 422
    huge = await client.patch(
        f"/api/chats/{chat_id}",
        content=json.dumps({"turns": [{"role": "user", "content": "x" * 15_000}] * 20}),
        headers={**auth(user), "content-type": "application/json"},
    )
    assert huge.status_code == 413
    assert huge.json()["error"]["code"] == "body_too_large"
    kept = (await client.get(f"/api/chats/{chat_id}", headers=auth(user))).json()
    assert kept["turn_count"] == 2


async def test_memory_records_are_the_users_own(client: httpx.AsyncClient, admin_conn: psycopg.Connection[Any]) -> None:
    alice, bob = uuid4(), uuid4()
    for user, text in ((alice, "Alice prefiere latón"), (bob, "Bob prefiere titanio")):
        fact = MemorizedFact(content=text, category="preference", confidence=0.9, source="explicit")
        payload = json.dumps([i.as_json() for i in items_from_update([fact], None, None, [], None)])
        admin_conn.execute("select public.memory_upsert_items(%s, %s::jsonb)", (user, payload))
    records = await client.get("/api/memory/records", params={"kind": "fact"}, headers=auth(alice))
    assert records.status_code == 200
    assert [r["content"] for r in records.json()] == ["Alice prefiere latón"]


async def test_openapi_schema_is_served(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    assert {"/api/chats", "/api/chats/{chat_id}", "/api/memory/records"} <= set(schema["paths"])
    assert "ErrorBody" in schema["components"]["schemas"]


@pytest.mark.slow
async def test_fuzzing_from_the_openapi_schema_finds_no_server_error(api: str, tmp_path: Any) -> None:
    """schemathesis generates requests from the served schema (60 per operation, 6 operations, fixed seed) with
    a valid user's token; no answer may be a 5xx."""
    user = uuid4()
    async with httpx.AsyncClient(base_url=api) as c:  # a chat of this user, so `{chat_id}` routes can hit one
        await c.post("/api/chats", json={"turns": turns(1, "fuzz")}, headers=auth(user))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schemathesis.cli", "run", f"{api}/openapi.json",
        "--checks", "not_a_server_error", "--phases", "examples,coverage,fuzzing", "--max-examples", "60",
        "--seed", "17", "--no-shrink", "--workers", "1", "-H", f"Authorization: Bearer {token(user)}",
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), timeout=280)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text[-4000:]
    generated = re.search(r"(\d+) generated", text)
    assert generated is not None, text[-2000:]
    assert int(generated.group(1)) >= 100  # the run really exercised the API
