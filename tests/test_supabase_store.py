"""`SupabaseStore`: the exact HTTP requests it sends (respx), its error mapping, per-user tokens under
concurrency, closing, and row-level security through the PostgREST emulator (tests/postgrest_transport.py).

Its behaviour as a `LongTermStore` is the shared contract: tests/test_store_contract.py runs on it too.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import psycopg
import pytest
import pytest_asyncio
import respx
from postgrest_transport import ANON_KEY, API_URL, PostgrestTransport, mint_token, supabase_store
from pydantic import SecretStr

from memory_plugin import (
    MemorizedFact,
    MemoryManager,
    MemorySettings,
    MemoryUpdate,
    StoreError,
    StoreUnavailableError,
    SupabaseStore,
)
from memory_plugin.outage import ResilientStore
from memory_plugin.quality import DecayPolicy
from memory_plugin.quality.rules import WriteRules
from memory_plugin.ranking import RankingWeights
from memory_plugin.rows import MemoryItem
from memory_plugin.store import ContextQuery
from memory_plugin.text import content_hash

ROW_TIME = "2026-11-22T10:00:00.123456+00:00"


def row(user_id: UUID, content: str = "Prefiere aluminio 7075", **over: Any) -> dict[str, Any]:
    """A `user_memory` row as PostgREST returns it (uuids and timestamps as strings)."""
    return {
        "id": str(uuid4()),
        "user_id": str(user_id),
        "kind": "fact",
        "category": "preference",
        "content": content,
        "confidence": 0.9,
        "source": "explicit",
        "importance": 3,
        "relevance_count": 0,
        "source_message_ids": ["m1"],
        "session_id": "s1",
        "attributes": {},
        "content_hash": content_hash("fact", "preference", content),
        "created_at": ROW_TIME,
        "updated_at": ROW_TIME,
        "last_reinforced_at": ROW_TIME,
        **over,
    }


def item(content: str = "Prefiere aluminio 7075") -> MemoryItem:
    return MemoryItem(
        kind="fact",
        category="preference",
        content=content,
        content_hash=content_hash("fact", "preference", content),
        confidence=0.9,
        source="explicit",
    )


_tokens: dict[UUID, str] = {}


def cached_token(user_id: UUID) -> str:
    """Each user's token minted once, so tests can compare the exact header."""
    return _tokens.setdefault(user_id, mint_token(user_id))


def sent_as(request: httpx.Request, user_id: UUID | None) -> None:
    """The request carries that user's token (the anon key for None) and the anon key as `apikey`."""
    token = ANON_KEY if user_id is None else cached_token(user_id)
    assert request.headers["authorization"] == f"Bearer {token}"
    assert request.headers["apikey"] == ANON_KEY


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=f"{API_URL}/rest/v1", assert_all_called=False) as router:
        yield router


@pytest_asyncio.fixture(loop_scope="session")
async def store() -> AsyncIterator[SupabaseStore]:
    s = SupabaseStore(API_URL, ANON_KEY, access_token=cached_token, timeout_seconds=2.0)
    yield s
    await s.close()


# --- the requests, pinned --------------------------------------------------------------------------


async def test_upsert_calls_memory_upsert_items_once_as_the_user(
    api: respx.MockRouter, store: SupabaseStore, user_id: UUID
) -> None:
    stored = row(user_id)
    route = api.post("/rpc/memory_upsert_items").respond(200, json=[stored])
    [record] = await store.upsert(user_id, [item()], WriteRules(reinforcement_step=0.1))

    request = route.calls.last.request
    sent_as(request, user_id)
    assert request.url.params.multi_items() == []
    assert json.loads(request.content) == {
        "p_user_id": str(user_id),
        "p_items": [item().as_json()],
        "p_reinforcement_step": 0.1,
        "p_near_duplicate_threshold": 0.8,
    }
    assert route.call_count == 1
    assert record.id == UUID(stored["id"])
    assert record.user_id == user_id
    assert record.created_at == datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)
    assert record.source_message_ids == ("m1",)
    assert record.confidence == pytest.approx(0.9)


async def test_upsert_sends_p_write_id_only_when_given(
    api: respx.MockRouter, store: SupabaseStore, user_id: UUID
) -> None:
    route = api.post("/rpc/memory_upsert_items").respond(200, json=[])
    write_id = uuid4()
    await store.upsert(user_id, [item()], WriteRules(reinforcement_step=0.2), write_id=write_id)
    assert json.loads(route.calls.last.request.content)["p_write_id"] == str(write_id)
    await store.upsert(user_id, [item()], WriteRules(reinforcement_step=0.2))
    assert "p_write_id" not in json.loads(route.calls.last.request.content)
    assert await store.upsert(user_id, [], WriteRules(reinforcement_step=0.2)) == []  # nothing to write: no request
    assert route.call_count == 2


async def test_context_calls_memory_context(api: respx.MockRouter, store: SupabaseStore, user_id: UUID) -> None:
    route = api.post("/rpc/memory_context").respond(200, json=[row(user_id), row(user_id, "Otro")])
    weights = RankingWeights(importance=0.5, confidence=0.4, recency=0.1, recency_window_days=10)
    now = datetime(2026, 11, 22, 12, tzinfo=UTC)
    records = await store.context(user_id, ContextQuery(max_facts=7, max_projects=2, max_patterns=1, weights=weights))
    assert [r.content for r in records] == ["Prefiere aluminio 7075", "Otro"]
    sent_as(route.calls.last.request, user_id)
    expected = {
        "p_user_id": str(user_id),
        "p_max_facts": 7,
        "p_max_projects": 2,
        "p_max_patterns": 1,
        "p_weight_importance": 0.5,
        "p_weight_confidence": 0.4,
        "p_weight_recency": 0.1,
        "p_recency_window_days": 10,
        "p_half_life_days": DecayPolicy().as_json(),
        "p_decay_floor": 0.2,
        "p_max_rejections": 20,
    }
    assert json.loads(route.calls.last.request.content) == expected  # no p_now: the function's now()
    await store.context(user_id, ContextQuery(max_facts=7, max_projects=2, max_patterns=1, weights=weights, now=now))
    assert json.loads(route.calls.last.request.content) == {**expected, "p_now": "2026-11-22T12:00:00+00:00"}


async def test_list_search_and_delete_are_filtered_table_requests(
    api: respx.MockRouter, store: SupabaseStore, user_id: UUID
) -> None:
    record_id = uuid4()
    get = api.get("/user_memory").respond(200, json=[])
    delete = api.delete("/user_memory").mock(
        side_effect=[httpx.Response(200, json=[row(user_id, id=str(record_id))]), httpx.Response(200, json=[])]
    )

    await store.list_records(user_id, kind="project", limit=5)
    sent_as(get.calls.last.request, user_id)
    assert sorted(get.calls.last.request.url.params.multi_items()) == [
        ("kind", "eq.project"),
        ("limit", "5"),
        ("order", "created_at.desc,id.asc"),
        ("select", "*"),
        ("user_id", f"eq.{user_id}"),
    ]
    await store.list_records(user_id)
    assert "kind" not in get.calls.last.request.url.params

    await store.search_text(user_id, "  100%_a*b. ", limit=3)
    sent_as(get.calls.last.request, user_id)
    assert sorted(get.calls.last.request.url.params.multi_items()) == [
        # A regex of the literal text: `ilike` would turn `*` into a wildcard.
        ("content", "imatch.100\\%\\_a\\*b\\."),
        ("limit", "3"),
        ("order", "importance.desc,confidence.desc,last_reinforced_at.desc"),
        ("select", "*"),
        ("user_id", f"eq.{user_id}"),
    ]

    assert await store.delete(user_id, record_id) is True
    assert await store.delete(user_id, record_id) is False
    request = delete.calls.last.request
    sent_as(request, user_id)
    assert sorted(request.url.params.multi_items()) == [("id", f"eq.{record_id}"), ("user_id", f"eq.{user_id}")]
    assert "return=representation" in request.headers["prefer"]


async def test_ping_asks_as_anon_and_any_answer_below_500_means_up(api: respx.MockRouter, store: SupabaseStore) -> None:
    route = api.get("/user_memory").mock(
        side_effect=[
            httpx.Response(401, json={"code": "42501", "message": "permission denied for table user_memory"}),
            httpx.Response(200, json=[]),
            httpx.Response(503, json={"code": "PGRST001", "message": "Database client error"}),
            httpx.ConnectError("refused"),
        ]
    )
    assert await store.ping() is True
    sent_as(route.calls.last.request, None)
    assert sorted(route.calls.last.request.url.params.multi_items()) == [("limit", "0"), ("select", "id")]
    assert await store.ping() is True
    assert await store.ping() is False
    assert await store.ping() is False


# --- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(500, json={"code": "XX000", "message": "internal error", "details": None, "hint": None}),
        httpx.Response(503, json={"code": "PGRST001", "message": "Database client error. Retrying the connection."}),
        httpx.Response(502, text="<html>Bad Gateway</html>"),
        httpx.Response(504, json={"message": "upstream timed out"}),  # a JSON body without any status in it
        httpx.ConnectError("Connection refused"),
        httpx.ReadTimeout("timed out"),
        httpx.ConnectTimeout("timed out"),
        httpx.RemoteProtocolError("peer closed connection"),
    ],
    ids=["500", "503", "502-html", "504-json", "refused", "read-timeout", "connect-timeout", "reset"],
)
async def test_unreachable_or_failing_api_raises_store_unavailable(
    api: respx.MockRouter, store: SupabaseStore, user_id: UUID, answer: httpx.Response | Exception
) -> None:
    api.post("/rpc/memory_context").mock(side_effect=[answer])
    with pytest.raises(StoreUnavailableError):
        await store.context(user_id, ContextQuery())


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (401, "PGRST301", "JWT expired"),
        (403, "42501", 'new row violates row-level security policy for table "user_memory"'),
        (409, "23505", 'duplicate key value violates unique constraint "user_memory_pkey"'),
        (400, "23514", 'new row for relation "user_memory" violates check constraint "user_memory_category_check"'),
        (404, "PGRST202", "Could not find the function public.memory_upsert_items"),
        (400, "PGRST100", "failed to parse filter"),
    ],
)
async def test_refusals_raise_store_error_with_postgrest_code_and_message(
    api: respx.MockRouter, store: SupabaseStore, user_id: UUID, status: int, code: str, message: str
) -> None:
    body = {"code": code, "message": message, "details": None, "hint": None}
    api.post("/rpc/memory_upsert_items").respond(status, json=body)
    with pytest.raises(StoreError) as raised:
        await store.upsert(user_id, [item()], WriteRules(reinforcement_step=0.1))
    assert not isinstance(raised.value, StoreUnavailableError)
    assert code in str(raised.value)
    assert message in str(raised.value)


async def test_refusal_without_a_json_body_is_a_store_error(
    api: respx.MockRouter, store: SupabaseStore, user_id: UUID
) -> None:
    api.get("/user_memory").respond(403, text="Forbidden")
    with pytest.raises(StoreError) as raised:
        await store.list_records(user_id)
    assert not isinstance(raised.value, StoreUnavailableError)
    assert "403" in str(raised.value)


async def test_timeout_is_explicit_and_enforced() -> None:
    """A real socket that accepts and never answers: the configured timeout ends the request."""

    release = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = SupabaseStore(f"http://127.0.0.1:{port}", ANON_KEY, cached_token, timeout_seconds=0.2)
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(StoreUnavailableError, match="ReadTimeout"):
            await store.list_records(uuid4())
        assert asyncio.get_running_loop().time() - started < 2
        assert await store.ping() is False
    finally:
        await store.close()
        release.set()
        server.close()
        await server.wait_closed()


async def test_connection_refused_is_unavailable() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()  # nothing listens on the port any more
    store = SupabaseStore(f"http://127.0.0.1:{port}", ANON_KEY, cached_token)
    try:
        with pytest.raises(StoreUnavailableError, match="ConnectError"):
            await store.search_text(uuid4(), "x")
    finally:
        await store.close()


# --- tokens ----------------------------------------------------------------------------------------------


async def test_concurrent_users_never_get_each_others_token(api: respx.MockRouter) -> None:
    """Many users' operations interleaved at every await: each request carries its own user's token."""
    rng = random.Random(3)
    users = [uuid4() for _ in range(25)]

    async def token_of(uid: UUID) -> str:
        await asyncio.sleep(rng.random() / 200)  # providers finish in random order
        return cached_token(uid)

    seen: list[tuple[str, str]] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(rng.random() / 200)  # requests in flight together
        if request.url.path.endswith("/rpc/memory_context"):
            subject = json.loads(request.content)["p_user_id"]
        else:
            subject = request.url.params["user_id"].removeprefix("eq.")
        seen.append((request.headers["authorization"], subject))
        return httpx.Response(200, json=[])

    api.post("/rpc/memory_context").mock(side_effect=answer)
    api.get("/user_memory").mock(side_effect=answer)
    store = SupabaseStore(API_URL, ANON_KEY, access_token=token_of)
    try:
        await asyncio.gather(
            *(store.context(u, ContextQuery()) for u in users),
            *(store.list_records(u) for u in users),
            *(store.search_text(u, "x") for u in reversed(users)),
        )
        assert len(seen) == 3 * len(users)
        assert all(auth == f"Bearer {cached_token(UUID(subject))}" for auth, subject in seen)
        assert store.client.postgrest.headers["authorization"] == f"Bearer {ANON_KEY}"  # shared client untouched
    finally:
        await store.close()


async def test_a_token_of_another_user_is_refused_before_sending(api: respx.MockRouter) -> None:
    alice, bob = uuid4(), uuid4()
    route = api.route().respond(200, json=[])
    for provider in (lambda _uid: cached_token(alice), cached_token(alice), lambda _uid: "not-a-jwt"):
        store = SupabaseStore(API_URL, ANON_KEY, access_token=provider)
        with pytest.raises(StoreError, match="not that user's"):
            await store.list_records(bob)
        await store.close()
    assert route.call_count == 0


async def test_token_provider_may_be_sync_async_or_fixed(api: respx.MockRouter) -> None:
    user = uuid4()
    route = api.get("/user_memory").respond(200, json=[])

    async def async_provider(uid: UUID) -> str:
        return cached_token(uid)

    for provider in (cached_token, async_provider, cached_token(user)):
        store = SupabaseStore(API_URL, ANON_KEY, access_token=provider)
        await store.list_records(user)
        sent_as(route.calls.last.request, user)
        await store.close()


async def test_a_failing_token_provider_is_a_store_error(api: respx.MockRouter) -> None:
    def broken(uid: UUID) -> str:
        raise LookupError("no session for this user")

    store = SupabaseStore(API_URL, ANON_KEY, access_token=broken)
    with pytest.raises(StoreError, match="no session for this user"):
        await store.context(uuid4(), ContextQuery())
    await store.close()


# --- lifecycle and configuration ------------------------------------------------------------------------


async def test_close_closes_the_http_client_and_later_calls_fail_cleanly(api: respx.MockRouter) -> None:
    store = SupabaseStore(API_URL, ANON_KEY, access_token=cached_token)
    http = store.client.options.httpx_client
    assert http is not None
    assert not http.is_closed
    await store.close()
    assert http.is_closed
    await store.close()  # idempotent
    assert await store.ping() is False
    with pytest.raises(StoreUnavailableError, match="closed"):
        await store.list_records(uuid4())


async def test_manager_uses_and_closes_the_store(api: respx.MockRouter, user_id: UUID) -> None:
    api.get("/user_memory").respond(200, json=[row(user_id)])
    store = SupabaseStore(API_URL, ANON_KEY, access_token=cached_token)
    async with MemoryManager.open(MemorySettings(), store=store) as memory:
        assert (await memory.describe())["backend"] == "supabase"
        assert [r.content for r in await memory.list_memory(user_id)] == ["Prefiere aluminio 7075"]
        assert memory.database_url is None
    http = store.client.options.httpx_client
    assert http is not None
    assert http.is_closed


def test_from_settings_reads_url_key_and_timeout() -> None:
    settings = MemorySettings(supabase_url=API_URL, supabase_anon_key=SecretStr(ANON_KEY), supabase_timeout_seconds=1.5)
    store = SupabaseStore.from_settings(settings, access_token=cached_token)
    assert store.backend_name == "supabase"
    assert str(store.client.supabase_url).rstrip("/") == API_URL
    http = store.client.options.httpx_client
    assert http is not None
    assert http.timeout == httpx.Timeout(1.5)
    with pytest.raises(ValueError, match="supabase_url"):
        SupabaseStore.from_settings(MemorySettings(), access_token=cached_token)


# --- through the PostgREST emulator: real SQL, real RLS ---------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def http(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """Raw HTTP to the emulator, for attacks the store itself would never send."""
    async with httpx.AsyncClient(
        transport=PostgrestTransport(database_url), base_url=f"{API_URL}/rest/v1", headers={"apikey": ANON_KEY}
    ) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_token_for_a_cannot_read_or_write_b_rows_through_the_api(
    database_url: str, http: httpx.AsyncClient, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    alice, bob = uuid4(), uuid4()
    store = supabase_store(database_url)
    try:
        [bob_row] = await store.upsert(bob, [item("Bob prefiere latón")], WriteRules(reinforcement_step=0.1))
    finally:
        await store.close()
    before = admin_conn.execute("select to_jsonb(m) from public.user_memory m where user_id = %s", (bob,)).fetchall()
    as_alice = bearer(mint_token(alice))

    # Reads: nothing of Bob's, whatever the filter or the function argument says.
    for params in ({"user_id": f"eq.{bob}"}, {"id": f"eq.{bob_row.id}"}, {}):
        answer = await http.get("/user_memory", params={"select": "*", **params}, headers=as_alice)
        assert (answer.status_code, answer.json()) == (200, [])
    answer = await http.post("/rpc/memory_context", json={"p_user_id": str(bob)}, headers=as_alice)
    assert (answer.status_code, answer.json()) == (200, [])

    # Writes: inserting or reinforcing as Bob is refused by RLS; deleting Bob's row deletes nothing.
    answer = await http.post(
        "/rpc/memory_upsert_items",
        json={"p_user_id": str(bob), "p_items": [item("Bob prefiere latón").as_json()]},
        headers=as_alice,
    )
    assert answer.status_code == 403
    assert answer.json()["code"] == "42501"
    answer = await http.delete(
        "/user_memory", params={"id": f"eq.{bob_row.id}"}, headers={**as_alice, "Prefer": "return=representation"}
    )
    assert (answer.status_code, answer.json()) == (200, [])

    # No token, the anon key, a forged or an expired token: refused.
    for headers in ({}, bearer(ANON_KEY)):
        answer = await http.get("/user_memory", params={"select": "*"}, headers=headers)
        assert (answer.status_code, answer.json()["code"]) == (401, "42501")
    for token in (mint_token(bob, secret="not-the-project-secret-0123456789abcdef"), mint_token(bob, ttl=-60)):
        answer = await http.get("/user_memory", params={"select": "*"}, headers=bearer(token))
        assert (answer.status_code, answer.json()["code"]) == (401, "PGRST301")

    after = admin_conn.execute("select to_jsonb(m) from public.user_memory m where user_id = %s", (bob,)).fetchall()
    assert after == before


async def test_search_treats_star_literally_through_the_api(database_url: str, user_id: UUID) -> None:
    store = supabase_store(database_url)
    try:
        await store.upsert(
            user_id, [item("Usa la pieza A*B"), item("Usa la pieza AxB")], WriteRules(reinforcement_step=0.1)
        )
        assert [r.content for r in await store.search_text(user_id, "a*b")] == ["Usa la pieza A*B"]
        assert [r.content for r in await store.search_text(user_id, "[x]")] == []
    finally:
        await store.close()


async def test_write_id_is_applied_once_through_the_api(database_url: str, user_id: UUID) -> None:
    store = supabase_store(database_url)
    try:
        write_id = uuid4()
        [first] = await store.upsert(user_id, [item()], WriteRules(reinforcement_step=0.1), write_id=write_id)
        [again] = await store.upsert(user_id, [item()], WriteRules(reinforcement_step=0.1), write_id=write_id)
        assert again.id == first.id
        assert again.relevance_count == 0  # the replay changed nothing
        [reinforced] = await store.upsert(user_id, [item()], WriteRules(reinforcement_step=0.1))
        assert reinforced.relevance_count == 1
    finally:
        await store.close()


async def test_concurrent_users_through_the_api_see_only_their_own_memory(database_url: str) -> None:
    users = [uuid4() for _ in range(8)]
    store = supabase_store(database_url)
    async with MemoryManager.open(MemorySettings(), store=store) as memory:

        async def remember_then_read(n: int, uid: UUID) -> list[str]:
            fact = MemorizedFact(
                content=f"Prefiere la aleación {n}", category="preference", confidence=0.9, source="explicit"
            )
            await memory.update_memory(MemoryUpdate(user_id=uid, new_facts=[fact]))
            return [f.content for f in (await memory.get_memory_context(f"s-{n}", uid)).long_term.facts]

        results = await asyncio.gather(*(remember_then_read(n, u) for n, u in enumerate(users)))
    assert results == [[f"Prefiere la aleación {n}"] for n in range(len(users))]


# --- outages: ResilientStore around SupabaseStore -----------------------------------------------------------------


def _fact(content: str) -> MemorizedFact:
    return MemorizedFact(content=content, category="requirement", confidence=0.9, source="explicit")


class FlakyNetwork(httpx.AsyncBaseTransport):
    """The emulator behind a network that can be cut: while `down`, every request fails to connect."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.down = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("network unreachable", request=request)
        return await self.inner.handle_async_request(request)


async def test_an_api_outage_loses_nothing_behind_resilient_store(
    database_url: str, tmp_path: Path, user_id: UUID, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    network = FlakyNetwork(PostgrestTransport(database_url))
    settings = MemorySettings(data_dir=tmp_path)
    api = SupabaseStore(API_URL, ANON_KEY, access_token=mint_token, transport=network)
    store = ResilientStore.around(api, settings, identity=API_URL)
    async with MemoryManager.open(settings, store=store) as memory:
        await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[_fact("Prefiere aluminio 7075")]))
        await memory.get_memory_context("s", user_id)  # read while up: cached

        network.down = True
        await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[_fact("Necesita certificado 3.1")]))
        ctx = await memory.get_memory_context("s", user_id)
        assert not ctx.long_term_available
        assert [f.content for f in ctx.long_term.facts] == ["Prefiere aluminio 7075"]  # the cached copy
        assert (await memory.backend_status()).journal_length == 1

        network.down = False
        await store.replay()  # the background replayer may have been first: either way, once
        assert (await memory.backend_status()).journal_length == 0

    stored = admin_conn.execute(
        "select content, relevance_count from public.user_memory where user_id = %s order by content", (user_id,)
    ).fetchall()
    assert stored == [("Necesita certificado 3.1", 0), ("Prefiere aluminio 7075", 0)]
