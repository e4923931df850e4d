"""The REST API follows web conventions: a bearer scheme in OpenAPI (so `/docs` has an Authorize button),
`/docs` served without a CDN, CORS for configured origins only, health routes, development tokens behind a
flag, and validation errors that name the field. The real app over the test database (httpx's ASGI transport)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from typer.testing import CliRunner

from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.api.cors import parse_origins
from memory_plugin.api.devtoken import DevTokenRefusedError, mint_dev_token
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.cli import app
from memory_plugin.settings import MemorySettings
from memory_plugin.store.postgres import PostgresStore
from tests.chat_helpers import word_embedder
from tests.test_api import SECRET, auth

ORIGIN = "https://app.example"

Pool = AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def pool(database_url: str) -> AsyncIterator[Pool]:
    pool: Pool = AsyncConnectionPool(
        database_url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    yield pool
    await pool.close()


def _services(pool: Pool) -> ApiServices:
    return ApiServices(
        chats=ChatService(PostgresChatStore(pool), word_embedder()),
        verifier=TokenVerifier(secret=SECRET),
        memory=PostgresStore(pool),
    )


def _client(services: ApiServices, cors: list[str] | None = None) -> httpx.AsyncClient:
    app = create_app(services, cors_origins=cors or [])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test")


async def test_openapi_declares_the_bearer_scheme_on_user_routes(pool: Pool) -> None:
    async with _client(_services(pool)) as client:
        schema = (await client.get("/openapi.json")).json()
    scheme = schema["components"]["securitySchemes"]["SupabaseUserToken"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    for path in ("/api/chats", "/api/chats/{chat_id}", "/api/memory/records"):
        for operation in schema["paths"][path].values():
            assert operation["security"] == [{"SupabaseUserToken": []}], path
    assert "security" not in schema["paths"]["/healthz"]["get"]


async def test_docs_page_and_its_assets_come_from_this_server(pool: Pool) -> None:
    async with _client(_services(pool)) as client:
        page = await client.get("/docs")
        assert page.status_code == 200
        assert "cdn" not in page.text.lower()
        assets = [a for a in ("/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css") if a in page.text]
        assert len(assets) == 2, page.text
        for asset in assets:
            answer = await client.get(asset)
            assert answer.status_code == 200
            assert len(answer.content) > 100_000
        assert (await client.get("/redoc")).status_code == 404  # ReDoc's page would load from a CDN


async def test_cors_preflight_is_answered_for_configured_origins_only(pool: Pool) -> None:
    preflight = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "PATCH",
        "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
    }
    async with _client(_services(pool), cors=parse_origins(f" {ORIGIN}/ , http://localhost:5173")) as client:
        answer = await client.options("/api/chats/00000000-0000-0000-0000-000000000000", headers=preflight)
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        assert "PATCH" in answer.headers["access-control-allow-methods"]
        assert "idempotency-key" in answer.headers["access-control-allow-headers"].lower()
        pause = {**preflight, "Access-Control-Request-Method": "PUT"}  # PUT /api/memory/pause from a browser
        answer = await client.options("/api/memory/pause", headers=pause)
        assert answer.status_code == 200
        assert "PUT" in answer.headers["access-control-allow-methods"]
        other = await client.options("/api/chats", headers={**preflight, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        # An actual cross-origin request (even a 401) carries the header, so the page can read the error.
        denied = await client.get("/api/chats", headers={"Origin": ORIGIN})
        assert denied.status_code == 401
        assert denied.headers["access-control-allow-origin"] == ORIGIN
    async with _client(_services(pool)) as client:  # the default: no CORS
        answer = await client.options("/api/chats", headers=preflight)
        assert answer.status_code == 405
        assert "access-control-allow-origin" not in answer.headers


async def test_health_routes_report_the_process_and_the_database(pool: Pool, database_url: str) -> None:
    async with _client(_services(pool)) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).status_code == 200
    # A database that does not answer: the process is alive, but not ready.
    dead: Pool = AsyncConnectionPool(
        "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1", min_size=1, open=False, timeout=2, kwargs={}
    )
    async with _client(ApiServices(chats=_services(pool).chats, verifier=TokenVerifier(secret=SECRET),
                                   memory=PostgresStore(dead))) as client:  # fmt: skip
        assert (await client.get("/healthz")).status_code == 200
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["code"] == "database_unavailable"


@pytest.mark.parametrize(
    ("turn", "message"),
    [
        ({"role": "user", "content": ""}, "turns[0].content must not be empty"),
        ({"role": "system", "content": "hola"}, "turns[0].role must be 'user' or 'assistant', not 'system'"),
        ({"role": "user"}, "turns[0].content is required"),
    ],
)
async def test_bad_turns_name_the_field_in_plain_words(pool: Pool, turn: dict[str, str], message: str) -> None:
    async with _client(_services(pool)) as client:
        answer = await client.post("/api/chats", json={"turns": [turn]}, headers=auth(uuid4()))
    assert answer.status_code == 422
    assert answer.json()["error"] == {"code": "invalid_turn", "message": message}


async def test_bad_requests_name_the_field_in_plain_words(pool: Pool) -> None:
    user = uuid4()
    async with _client(_services(pool)) as client:
        limit = await client.get("/api/chats", params={"limit": 0}, headers=auth(user))
        title = await client.post("/api/chats", json={"title": ""}, headers=auth(user))
        extra = await client.post("/api/chats", json={"owner": "x"}, headers=auth(user))
        chat = await client.get("/api/chats/not-a-uuid", headers=auth(user))
        broken = await client.post(
            "/api/chats", content=b"{", headers={**auth(user), "content-type": "application/json"}
        )
    assert limit.json()["error"]["message"] == "query parameter limit must be ≥ 1, not '0'"
    assert title.json()["error"]["message"] == "title must not be empty"
    assert extra.json()["error"]["message"] == "owner is not a field of this request: remove it"
    assert chat.json()["error"]["message"].startswith("path parameter chat_id must be a UUID")
    assert broken.json()["error"]["message"].startswith("the request body is not valid JSON")


async def test_a_development_token_is_accepted_by_the_api(pool: Pool) -> None:
    settings = MemorySettings(jwt_secret=SECRET, api_dev_tokens=True)
    user = uuid4()
    minted = mint_dev_token(settings, user)
    async with _client(_services(pool)) as client:
        created = await client.post("/api/chats", json={}, headers={"Authorization": f"Bearer {minted}"})
        assert created.status_code == 201
        listed = await client.get("/api/chats", headers=auth(user))
    assert [c["id"] for c in listed.json()["items"]] == [created.json()["id"]]


def test_development_tokens_are_refused_unless_enabled_and_signed() -> None:
    with pytest.raises(DevTokenRefusedError, match="MEMORY_API_DEV_TOKENS=1"):
        mint_dev_token(MemorySettings(jwt_secret=SECRET), uuid4())
    with pytest.raises(DevTokenRefusedError, match="MEMORY_JWT_SECRET"):
        mint_dev_token(MemorySettings(api_dev_tokens=True), uuid4())


def test_token_command_refuses_without_the_flag(tmp_path: Path) -> None:
    env = {"MEMORY_JWT_SECRET": SECRET, "MEMORY_DATA_DIR": str(tmp_path), "MEMORY_API_DEV_TOKENS": "0"}
    command = ["token", "--user", str(uuid4())]
    refused = CliRunner().invoke(app, command, env=env)
    assert refused.exit_code == 1
    assert "MEMORY_API_DEV_TOKENS=1" in refused.stderr
    assert refused.stdout == ""
    allowed = CliRunner().invoke(app, command, env=env | {"MEMORY_API_DEV_TOKENS": "1"})
    assert allowed.exit_code == 0, allowed.output
    assert allowed.stdout.strip().count(".") == 2  # header.claims.signature
