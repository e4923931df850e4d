"""The memory turn over HTTP (`POST /api/memory/context`, `POST /api/memory/turns`): the same `Turn` the capability
runs, for a client that is not Python. The real app over the test database (httpx's ASGI transport), a real
manager with the offline rules extractor; the user always comes from the bearer token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
import pytest_asyncio

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.schemas import MAX_TURN_CHARS
from memory_plugin.api.turn_keys import TurnKeys
from memory_plugin.chats.idempotency import AppendKey
from memory_plugin.errors import IdempotencyKeyReusedError, SessionOwnershipError
from tests.test_api import auth
from tests.test_api_web import Pool, _client, _services, pool  # noqa: F401 (the fixture)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def manager(database_url: str, data_dir: Path) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(MemorySettings(database_url=database_url, data_dir=data_dir)) as memory:
        yield memory


@pytest_asyncio.fixture(loop_scope="session")
async def client(pool: Pool, manager: MemoryManager) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    services = ApiServices(
        **{**vars(_services(pool)), "manager": manager, "consent": manager.memory_switch, "pool": pool}
    )
    async with _client(services) as c:
        yield c


async def context(client: httpx.AsyncClient, user: UUID, session: str, prompt: str) -> dict[str, Any]:
    answer = await client.post(
        "/api/memory/context", json={"session_id": session, "prompt": prompt}, headers=auth(user)
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def texts(history: list[dict[str, Any]]) -> list[str]:
    return [part["content"] for message in history for part in message["parts"] if "content" in part]


FINISH = {
    "session_id": "chat-1",
    "prompt": "Recuerda que prefiero tornillos de titanio",
    "answer": "Anotado: tornillos de titanio.",
    "inline": True,
}


async def test_context_then_finish_then_context_shows_the_exchange_and_the_facts(client: httpx.AsyncClient) -> None:
    user = uuid4()
    first = await context(client, user, "chat-1", "Hola")
    assert first["history"] == []
    assert "titanio" not in first["instructions"] + first["turn_memory"]
    assert first["receipt"]["session_id"] == "chat-1"
    assert first["receipt"]["tokens"]["total"] > 0

    finished = await client.post("/api/memory/turns", json=FINISH, headers=auth(user))
    assert finished.status_code == 200, finished.text
    outcome = finished.json()
    assert outcome["recorded"] is True, outcome
    assert outcome["extraction"] == "inline", outcome
    assert any("titanio" in fact["content"] for fact in outcome["stored"]), outcome

    again = await context(client, user, "chat-1", "¿Qué tornillos me recomiendas?")
    assert texts(again["history"]) == [FINISH["prompt"], FINISH["answer"]]
    assert "titanio" in again["instructions"]  # a preference lasts: in the instructions (the slots)
    # The receipt names the stored facts, and it is kept for GET /api/memory/receipts.
    stored = {fact["id"] for fact in outcome["stored"]}
    assert stored <= {f["id"] for f in again["receipt"]["in_slots"] + again["receipt"]["injected"]}
    assert again["receipt"]["messages_kept"] == 2
    kept = (await client.get("/api/memory/receipts", headers=auth(user))).json()
    assert kept
    assert kept[0]["session_id"] == "chat-1"


async def test_a_queued_extraction_reaches_the_next_context_once_the_worker_ran(
    client: httpx.AsyncClient, manager: MemoryManager
) -> None:
    user = uuid4()
    finished = await client.post("/api/memory/turns", json={**FINISH, "inline": False}, headers=auth(user))
    outcome = finished.json()
    assert outcome["extraction"] == "queued", outcome
    assert outcome["job_id"] is not None
    assert outcome["stored"] == []
    assert await manager.flush()
    again = await context(client, user, "chat-1", "¿Qué tornillos me recomiendas?")
    assert "titanio" in again["instructions"]


async def test_another_user_sees_nothing_and_cannot_name_a_user(
    client: httpx.AsyncClient, manager: MemoryManager
) -> None:
    owner, other = uuid4(), uuid4()
    assert (await client.post("/api/memory/turns", json=FINISH, headers=auth(owner))).status_code == 200

    seen = await context(client, other, "chat-1", "¿Qué tornillos prefiero?")
    assert seen["history"] == []
    assert "titanio" not in seen["instructions"] + seen["turn_memory"] + seen["summary"]
    assert (await client.get("/api/memory/records", headers=auth(other))).json() == []
    # The owner's session still holds only the owner's exchange.
    short = await manager.get_short_term("chat-1", user_id=owner)
    assert [m.content for m in short.messages] == [FINISH["prompt"], FINISH["answer"]]

    # The user is the token's: a body naming one is refused, as is a request without a token.
    named = await client.post("/api/memory/turns", json={**FINISH, "user_id": str(owner)}, headers=auth(other))
    assert named.status_code == 422
    assert named.json()["error"]["code"] == "invalid_request"
    anonymous = await client.post("/api/memory/context", json={"session_id": "chat-1", "prompt": "Hola"})
    assert anonymous.status_code == 401


async def test_a_retried_finish_records_the_exchange_once(client: httpx.AsyncClient, manager: MemoryManager) -> None:
    user = uuid4()
    headers = {**auth(user), "Idempotency-Key": str(uuid4())}
    body = {**FINISH, "session_id": "retried", "inline": False}
    # The first attempt and its retries, two of them concurrent with it.
    answers = await asyncio.gather(*(client.post("/api/memory/turns", json=body, headers=headers) for _ in range(3)))
    answers.append(await client.post("/api/memory/turns", json=body, headers=headers))
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert len({a.text for a in answers}) == 1  # every retry gets the first attempt's outcome
    short = await manager.get_short_term("retried", user_id=user)
    assert [m.content for m in short.messages] == [FINISH["prompt"], FINISH["answer"]]

    reused = await client.post("/api/memory/turns", json={**body, "answer": "Otra respuesta"}, headers=headers)
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    # Another user's same key is their own.
    theirs = await client.post(
        "/api/memory/turns", json=body, headers={**auth(uuid4()), **{"Idempotency-Key": headers["Idempotency-Key"]}}
    )
    assert theirs.status_code == 200
    # Without a key, a second finish is a second exchange.
    assert (await client.post("/api/memory/turns", json=body, headers=auth(user))).status_code == 200
    assert len((await manager.get_short_term("retried", user_id=user)).messages) == 4


async def test_a_paused_memory_refuses_a_finish_with_423_and_records_nothing(
    client: httpx.AsyncClient, manager: MemoryManager
) -> None:
    user = uuid4()
    assert (await client.put("/api/memory/pause", json={"paused": True}, headers=auth(user))).status_code == 200
    refused = await client.post("/api/memory/turns", json={**FINISH, "session_id": "paused"}, headers=auth(user))
    assert refused.status_code == 423
    assert refused.json()["error"]["code"] == "memory_paused"
    assert (await manager.get_short_term("paused", user_id=user)).messages == []
    assert (await client.get("/api/memory/records", headers=auth(user))).json() == []
    assert (await context(client, user, "paused", "Hola"))["history"] == []  # reads work either way

    assert (await client.put("/api/memory/pause", json={"paused": False}, headers=auth(user))).status_code == 200
    resumed = await client.post("/api/memory/turns", json={**FINISH, "session_id": "paused"}, headers=auth(user))
    assert resumed.status_code == 200
    assert resumed.json()["recorded"] is True


async def test_bounds_are_a_typed_422_before_anything_is_recorded(
    client: httpx.AsyncClient, manager: MemoryManager
) -> None:
    user = uuid4()
    too_long_id = {**FINISH, "session_id": "s" * 300}
    answer = await client.post("/api/memory/turns", json=too_long_id, headers=auth(user))
    assert answer.status_code == 422
    assert "session_id" in answer.json()["error"]["message"]
    long_prompt = {**FINISH, "session_id": "bounds", "prompt": "x" * (MAX_TURN_CHARS + 1)}
    answer = await client.post("/api/memory/turns", json=long_prompt, headers=auth(user))
    assert answer.status_code == 422
    assert "prompt" in answer.json()["error"]["message"]
    nul = await client.post(
        "/api/memory/context", json={"session_id": "bounds", "prompt": "a\u0000b"}, headers=auth(user)
    )
    assert nul.status_code == 422
    assert (await manager.get_short_term("bounds", user_id=user)).messages == []


async def test_without_a_manager_the_turn_routes_answer_404(pool: Pool) -> None:  # noqa: F811
    async with _client(_services(pool)) as client:
        answer = await client.post(
            "/api/memory/context", json={"session_id": "s", "prompt": "Hola"}, headers=auth(uuid4())
        )
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "no_memory_turn"


async def test_openapi_documents_the_turn_with_the_bearer_scheme_the_key_and_examples(
    client: httpx.AsyncClient,
) -> None:
    schema = (await client.get("/openapi.json")).json()
    context_route = schema["paths"]["/api/memory/context"]["post"]
    finish_route = schema["paths"]["/api/memory/turns"]["post"]
    for route in (context_route, finish_route):
        assert route["security"] == [{"SupabaseUserToken": []}]
    assert {"423", "503"} <= finish_route["responses"].keys()
    assert [p["name"] for p in finish_route["parameters"]] == ["Idempotency-Key"]
    for name in ("ContextIn", "ContextOut", "TurnIn", "TurnOut"):
        assert schema["components"]["schemas"][name]["examples"], name


async def test_turn_keys_forget_a_failed_or_unrecorded_attempt_and_stay_bounded() -> None:
    keys, user = TurnKeys(max_keys=2), uuid4()
    runs: list[str] = []

    async def work(result: bool) -> bool:
        runs.append("run")
        if not runs[1:] and not result:
            raise RuntimeError("the database went away")
        return result

    key = AppendKey("k", "hash")
    with pytest.raises(RuntimeError):
        await keys.once(user, key, lambda: work(False), keep=bool)
    assert await keys.once(user, key, lambda: work(False), keep=bool) is False  # ran again: not recorded either
    assert await keys.once(user, key, lambda: work(True), keep=bool) is True  # ran again, and kept
    assert await keys.once(user, key, lambda: work(False), keep=bool) is True  # the kept outcome, not run
    assert len(runs) == 3
    with pytest.raises(IdempotencyKeyReusedError):
        await keys.once(user, AppendKey("k", "another"), lambda: work(True), keep=bool)
    for name in ("a", "b", "c"):
        await keys.once(user, AppendKey(name, "hash"), lambda: work(True), keep=bool)
    assert len(keys) == 2  # the oldest keys go first


async def test_a_session_ownership_error_is_answered_as_a_session_that_does_not_exist(pool: Pool) -> None:  # noqa: F811
    # The API always passes the token's user, so its own routes never meet one; a route of the application's
    # that calls the manager without a user gets the same answer as someone else's chat.
    app = create_app(_services(pool))

    @app.get("/probe")
    async def probe() -> None:
        raise SessionOwnershipError("session 'chat-1' belongs to a user: pass its user_id")

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test") as client:
        answer = await client.get("/probe")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "session_not_found"
