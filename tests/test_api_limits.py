"""The API's growth is bounded per user: a request rate answered with 429 and `Retry-After`, and the per-user
counts the database enforces (chats per user) answered with 429 `limit_reached`, never a 500 or a stored row
past the limit. The real app over the test database."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import httpx
import psycopg

from memory_plugin.api.app import create_app
from memory_plugin.api.limits import RateLimiter
from tests.test_api import auth
from tests.test_api_web import Pool, _services, pool  # noqa: F401 (the fixture)


def client(pool_: Pool, **limits: Any) -> httpx.AsyncClient:
    app = create_app(_services(pool_), **limits)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test")


async def test_a_user_past_the_request_rate_gets_429_with_retry_after_and_others_do_not(
    pool: Pool,  # noqa: F811
) -> None:
    greedy, other = uuid4(), uuid4()
    async with client(pool, rate_per_second=0.01, rate_burst=3) as api:
        answers = [(await api.get("/api/chats", headers=auth(greedy))).status_code for _ in range(4)]
        refused = await api.get("/api/chats", headers=auth(greedy))
        assert (await api.get("/api/chats", headers=auth(other))).status_code == 200
    assert answers == [200, 200, 200, 429]
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1


def test_the_bucket_refills_at_the_rate_and_forgets_idle_users_first() -> None:
    now = [0.0]
    limiter = RateLimiter(2.0, 2, clock=lambda: now[0])
    assert [limiter.wait("a") for _ in range(3)] == [0.0, 0.0, 0.5]
    now[0] += 0.5
    assert limiter.wait("a") == 0.0
    assert RateLimiter(0, 1).wait("a") == 0.0  # 0: off


async def test_past_the_users_chat_limit_the_api_answers_429_and_stores_nothing(
    pool: Pool,  # noqa: F811
    admin_conn: psycopg.Connection[tuple[Any, ...]],
) -> None:
    user = uuid4()
    admin_conn.execute(
        "insert into memory_private.memory_limits (name, user_id, value) values ('chats_per_user', %s, 2)", (user,)
    )
    async with client(pool) as api:
        made = [(await api.post("/api/chats", json={}, headers=auth(user))).status_code for _ in range(2)]
        refused = await api.post("/api/chats", json={"title": "one too many"}, headers=auth(user))
        page = (await api.get("/api/chats", headers=auth(user))).json()
    assert made == [201, 201]
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "limit_reached"
    assert page["total"] == 2


async def test_a_patch_answer_stays_the_size_of_its_request_as_the_chat_grows(pool: Pool) -> None:  # noqa: F811
    user = uuid4()
    async with client(pool) as api:
        chat = (await api.post("/api/chats", json={}, headers=auth(user))).json()
        sizes = []
        for i in range(6):
            body = {"turns": [{"role": "user", "content": f"pedido {i} " + "x" * 19_000}]}
            answer = await api.patch(f"/api/chats/{chat['id']}", json=body, headers=auth(user))
            assert answer.status_code == 200
            sizes.append(len(answer.content))
    # The whole chat would grow by ~19 kB per request; what changed stays ~one turn.
    assert max(sizes) < 2 * 20_000
    assert sizes[-1] < sizes[0] + 2_000


async def test_a_chunked_body_over_the_limit_gets_413_not_400(pool: Pool) -> None:  # noqa: F811
    async def chunks() -> Any:
        yield b'{"title": "'
        for _ in range(40):
            yield b"x" * 10_000
        yield b'"}'

    async with client(pool, max_body_bytes=100_000) as api:
        answer = await api.post(
            "/api/chats", content=chunks(), headers={**auth(uuid4()), "content-type": "application/json"}
        )
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "body_too_large"
