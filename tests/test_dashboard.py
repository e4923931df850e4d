"""The memory dashboard in headless Chromium (Debian's `chromium`, driven by Playwright): a user signs in with
the development sign-in, sees their memory grouped by kind, corrects a fact, deletes one, exports, and erases
everything, and the database is checked after each step; another user's fact or chat is never shown nor changed,
whatever id is put in a URL or a form. Every page is screenshotted into the test's tmp dir."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import jwt
import psycopg
import pytest
import pytest_asyncio
import uvicorn
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from memory_plugin import MemoryManager
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.consent import ConsentStore
from memory_plugin.context.budget import ContextReport
from memory_plugin.context.receipt import ContextReceipt, ReceiptFact
from memory_plugin.dashboard import add_dashboard
from memory_plugin.dashboard.routes import FACTS_PER_PAGE
from memory_plugin.database.admin import USER_TABLES_SQL
from memory_plugin.export.service import PoolExporter
from memory_plugin.models import MemorizedFact, UserPreferences
from memory_plugin.store.postgres import PostgresStore
from memory_plugin.write.items import items_from_update
from tests.chat_helpers import word_embedder
from tests.export_helpers import fill_user
from tests.test_api import free_port

playwright_api = pytest.importorskip("playwright.async_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]

SECRET = "dashboard-secret-with-at-least-32-bytes-of-entropy"


def mint(user: UUID) -> str:
    claims = {"sub": str(user), "role": "authenticated", "aud": "authenticated", "exp": int(time.time()) + 600}
    return jwt.encode(claims, SECRET, "HS256")


@dataclass
class Served:
    url: str
    store: PostgresStore
    chats: ChatService
    consent: ConsentStore | None


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def served(database_url: str) -> AsyncIterator[Served]:
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=6, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    store = PostgresStore(pool)
    chats = ChatService(PostgresChatStore(pool), word_embedder())
    consent = ConsentStore(pool=pool)
    services = ApiServices(
        chats=chats,
        verifier=TokenVerifier(secret=SECRET),
        memory=store,
        exporter=PoolExporter(pool),
        consent=consent,
        pool=pool,
    )
    app = create_app(services)
    add_dashboard(app, services, pool, dev_login=mint)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    for _ in range(1500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.02)
    assert server.started, "uvicorn did not start"
    yield Served(f"http://127.0.0.1:{port}", store, chats, consent)
    server.should_exit = True
    await task
    await pool.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(tmp_path: Path) -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = await browser.new_context(
            locale="en-US", accept_downloads=True, viewport={"width": 1100, "height": 900}
        )
        yield await context.new_page()
        await browser.close()


async def seed(served: Served, user: UUID, facts: list[str]) -> None:
    memorized = [
        MemorizedFact(content=f, category="fact", confidence=0.8, source="explicit", source_message_ids=(f"m{i}",))
        for i, f in enumerate(facts)
    ]
    prefs = UserPreferences(preferred_materials=["aluminio 7075"])
    await served.store.upsert(user, items_from_update(memorized, prefs, None, [], "s1"))
    turns = [
        ModelRequest(parts=[UserPromptPart("Necesito 200 soportes de aluminio 7075 para diciembre.")]),
        ModelResponse(parts=[TextPart("Anotado: 200 soportes en 7075, entrega en diciembre.")]),
    ]
    await served.chats.create(user, title=f"Soportes {str(user)[:4]}", turns=turns)
    slots = {
        "goal": [{"text": "Entregar 200 soportes en diciembre", "message_ids": ["m7"], "at": "2026-11-20T10:00:00Z"}]
    }
    async with served.store.pool.connection() as conn:
        await conn.execute(
            "insert into public.memory_slots (user_id, slots) values (%s, %s::jsonb)", (user, json.dumps(slots))
        )
        for version, summary in ((1, "Pidió soportes."), (2, "Pidió 200 soportes de aluminio 7075 para diciembre.")):
            await conn.execute(
                "insert into public.memory_summaries (user_id, scope, version, content, kind)"
                " values (%s, 'user', %s, %s, 'extractive')",
                (user, version, summary),
            )


async def sign_in(page: Any, served: Served, user: UUID, screenshot: Path | None = None) -> None:
    await page.goto(f"{served.url}/dashboard")
    if screenshot is not None:
        await page.screenshot(path=screenshot, full_page=True)
    await page.get_by_label("User id (UUID)").fill(str(user))
    await page.locator("form[action='/dashboard/dev-login'] button").click()
    await page.wait_for_url(f"{served.url}/dashboard")


async def facts_of(served: Served, user: UUID) -> dict[str, bool]:
    """content -> current, as the database holds them."""
    rows = await served.store.list_records(user, kind="fact")
    return {r.content: r.invalid_at is None for r in rows}


async def rows_left(served: Served, user: UUID) -> dict[str, int]:
    """Rows of `user` in every table with a `user_id` column (the catalog's list, as `erase_user` uses)."""
    left: dict[str, int] = {}
    async with served.store.pool.connection() as conn:
        tables = await (await conn.execute(USER_TABLES_SQL)).fetchall()
        for row in tables:
            schema, name = row.values()
            query = sql.SQL("select count(*) as n from {} where user_id = %s").format(sql.Identifier(schema, name))
            counted = await (await conn.execute(query, (user,))).fetchone()
            if counted is not None and counted["n"]:
                left[f"{schema}.{name}"] = counted["n"]
    return left


async def test_see_correct_delete_export_and_erase(served: Served, page: Any, tmp_path: Path) -> None:
    user = uuid4()
    await seed(served, user, ["Trabaja en el taller de Bilbao", "Prefiere entregas los lunes"])
    await sign_in(page, served, user, tmp_path / "sign-in.png")
    await page.screenshot(path=tmp_path / "memory.png", full_page=True)
    body = await page.locator("main").inner_text()
    assert "Trabaja en el taller de Bilbao" in body
    assert "Prefiere entregas los lunes" in body
    assert "aluminio 7075" in body
    assert "Soportes" in body
    assert "Entregar 200 soportes en diciembre" in body
    assert "Pidió 200 soportes de aluminio 7075" in body

    await page.get_by_role("link", name=f"Soportes {str(user)[:4]}").click()
    await page.screenshot(path=tmp_path / "chat.png", full_page=True)
    assert await page.get_by_role("heading", name=f"Soportes {str(user)[:4]}").is_visible()
    assert "Anotado: 200 soportes en 7075" in await page.locator("main").inner_text()
    await page.get_by_role("link", name="Español").click()
    await page.screenshot(path=tmp_path / "memory-es.png", full_page=True)
    assert "Hechos (2)" in await page.locator("main").inner_text()
    await page.get_by_role("link", name="English").click()

    bilbao = page.locator("li", has_text="Trabaja en el taller de Bilbao").first
    await bilbao.get_by_label("Corrected text").fill("Trabaja en el taller de Vitoria")
    await bilbao.get_by_role("button", name="Correct").click()
    await page.wait_for_url("**/dashboard?done=corrected")
    assert await facts_of(served, user) == {
        "Trabaja en el taller de Vitoria": True,
        "Trabaja en el taller de Bilbao": False,  # superseded, kept as history
        "Prefiere entregas los lunes": True,
    }
    await page.screenshot(path=tmp_path / "corrected.png", full_page=True)

    await page.get_by_role("button", name="Delete: Prefiere entregas los lunes").click()
    await page.wait_for_url("**/dashboard?done=deleted")
    assert "Prefiere entregas los lunes" not in await facts_of(served, user)

    await page.get_by_role("button", name="Pause memory").click()
    await page.wait_for_url("**/dashboard?done=paused")
    assert served.consent is not None
    assert await served.consent.paused(user)
    await page.get_by_role("button", name="Resume memory").click()
    await page.wait_for_url("**/dashboard?done=resumed")
    assert not await served.consent.paused(user)

    async with page.expect_download() as download_info:
        await page.get_by_role("link", name="Export everything (JSON)").click()
    saved = await (await download_info.value).path()
    exported = json.loads(await asyncio.to_thread(Path(saved).read_text))
    assert "Trabaja en el taller de Vitoria" in json.dumps(exported)
    assert str(user) in json.dumps(exported)

    await page.get_by_role("link", name="Erase everything").click()
    await page.screenshot(path=tmp_path / "erase.png", full_page=True)
    await page.get_by_label("Type ERASE to confirm").fill("nope")
    await page.get_by_role("button", name="Erase everything").click()
    assert await facts_of(served, user)  # a wrong confirmation erases nothing
    await page.get_by_label("Type ERASE to confirm").fill("ERASE")
    await page.get_by_role("button", name="Erase everything").click()
    await page.wait_for_url("**/dashboard?done=erased*")
    await page.screenshot(path=tmp_path / "erased.png", full_page=True)
    assert await facts_of(served, user) == {}
    assert await served.chats.list_chats(user, limit=10, offset=0) == ([], 0)
    # What a user may not change stays (RLS: select only), holding no content: the per-table row counters, now
    # zero, and the write-rate bucket, so erasing cannot reset a rate limit. `memory-plugin erase` removes them.
    assert set(await rows_left(served, user)) <= {"memory_private.memory_usage", "memory_private.memory_write_buckets"}
    async with served.store.pool.connection() as conn:
        counted = await (
            await conn.execute("select sum(n) as n from memory_private.memory_usage where user_id = %s", (user,))
        ).fetchone()
    assert counted is not None
    assert not counted["n"]


async def test_another_users_memory_is_never_shown_nor_changed(served: Served, page: Any, tmp_path: Path) -> None:
    alice, bob = uuid4(), uuid4()
    await seed(served, alice, ["Alice trabaja con latón"])
    await seed(served, bob, ["Bob trabaja con titanio"])
    [bob_fact] = await served.store.list_records(bob, kind="fact")
    [bob_chat], _ = await served.chats.list_chats(bob, limit=1, offset=0)
    await sign_in(page, served, alice)
    assert "titanio" not in await page.content()

    response = await page.goto(f"{served.url}/dashboard/chats/{bob_chat.id}")
    assert response.status == 404
    assert "Soportes" not in await page.content()
    await page.screenshot(path=tmp_path / "not-found.png", full_page=True)

    # Alice's own forms, aimed at Bob's fact: same CSRF token, someone else's id.
    await page.goto(f"{served.url}/dashboard")
    for form in ("correct", "delete"):
        await page.evaluate(
            "([form, id]) => { const f = document.querySelector(`form[action$='/${form}']`);"
            " f.action = `/dashboard/facts/${id}/${form}`; f.submit(); }",
            [form, str(bob_fact.id)],
        )
        await page.wait_for_load_state()
        assert "Not found" in await page.locator("main").inner_text()
        await page.goto(f"{served.url}/dashboard")
    assert await facts_of(served, bob) == {"Bob trabaja con titanio": True}


async def test_forms_need_the_sessions_csrf_token_and_dev_login_can_be_off(served: Served) -> None:
    user = uuid4()
    await seed(served, user, ["Usa fresadora de 5 ejes"])
    [fact] = await served.store.list_records(user, kind="fact")
    cookies = {"memory_dashboard": mint(user)}
    async with httpx.AsyncClient(base_url=served.url, cookies=cookies) as client:
        forged = await client.post(f"/dashboard/facts/{fact.id}/delete", data={"csrf": "0" * 64})
        assert forged.status_code == 403
        assert (await client.post("/dashboard/erase", data={"confirm": "ERASE"})).status_code == 403
        home = (await client.get("/dashboard")).text
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', home)
        assert token is not None
        too_long = {"csrf": token.group(1), "content": "x" * 501}
        refused = await client.post(f"/dashboard/facts/{fact.id}/correct", data=too_long)
        assert refused.status_code == 422
        assert "at most 500 characters" in refused.text
        spanish = await client.get("/dashboard", headers={"Accept-Language": "es-ES,es;q=0.9"})
        assert "Tu memoria" in spanish.text
        assert 'lang="es"' in spanish.text
    assert await facts_of(served, user) == {"Usa fresadora de 5 ejes": True}
    async with httpx.AsyncClient(base_url=served.url) as client:
        assert (await client.get("/dashboard")).status_code == 200  # the sign-in page
        assert (await client.get("/dashboard/export")).status_code == 401


def bare_app(served: Served, **options: Any) -> httpx.AsyncClient:
    """A second app over the same services, called in-process, with other dashboard options."""
    services = ApiServices(chats=served.chats, verifier=TokenVerifier(secret=SECRET), memory=served.store)
    app = create_app(services)
    add_dashboard(app, services, served.store.pool, **options)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dashboard.test")


async def test_sign_in_with_an_access_token_sets_a_strict_cookie_and_dev_sign_in_is_off_by_default(
    served: Served,
) -> None:
    user = uuid4()
    async with bare_app(served) as client:
        login = await client.get("/dashboard")
        assert "dev-login" not in login.text
        nonce = login.cookies["memory_dashboard_login"]
        refused = await client.post("/dashboard/dev-login", data={"user": str(user), "nonce": nonce})
        assert refused.status_code == 403
        assert "memory_dashboard" not in refused.cookies

        nonce = client.cookies["memory_dashboard_login"]
        bad = await client.post("/dashboard/login", data={"token": "not-a-token", "nonce": nonce})
        assert bad.status_code == 401
        assert "not accepted" in bad.text
        forged = await client.post("/dashboard/login", data={"token": mint(user), "nonce": "other"})
        assert forged.status_code == 403  # login CSRF: the nonce must match the page's cookie

        nonce = client.cookies["memory_dashboard_login"]  # each sign-in page sets a new one
        signed = await client.post("/dashboard/login", data={"token": mint(user), "nonce": nonce})
        assert signed.status_code == 303
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert "path=/dashboard" in cookie
        home = await client.get("/dashboard")
        assert str(user) in home.text
        assert home.headers["cache-control"] == "no-store"
        assert "default-src 'none'" in home.headers["content-security-policy"]


async def test_facts_are_shown_a_page_at_a_time(served: Served) -> None:
    user = uuid4()
    await seed(served, user, [f"Pedido número {i} de bridas" for i in range(FACTS_PER_PAGE + 5)])
    async with bare_app(served) as client:
        client.cookies.set("memory_dashboard", mint(user))
        first = (await client.get("/dashboard")).text
        second = (await client.get("/dashboard", params={"page": 2})).text
    assert first.count("/correct") == FACTS_PER_PAGE
    assert second.count("/correct") == 5
    assert f"({FACTS_PER_PAGE + 5})" in first
    assert "page 2 of 2" in second


async def test_the_last_receipt_is_shown_when_the_agent_runs_in_this_process(served: Served) -> None:
    user = uuid4()
    shown = ReceiptFact(
        id=uuid4(), content="Prefiere aluminio 7075", category="preference", reason="search", tokens=9, score=0.8123
    )
    cut = ReceiptFact(id=uuid4(), content="Visitó Bilbao en 2024", category="fact", reason="ranked", tokens=7)
    receipt = ContextReceipt(
        session_id="s-42", user_id=user, at=datetime.now(UTC),
        report=ContextReport(budget=2000, counter="chars", facts=9),
        injected=(shown,), in_slots=(), cut=(cut,), standing_tokens=40, turn_tokens=20, messages_kept=4,
        messages_dropped=0, summary_cut=False,
    )  # fmt: skip
    receipts = {user: receipt}
    async with bare_app(served, dev_login=mint, receipts=receipts.get) as client:
        client.cookies.set("memory_dashboard", mint(user))
        page = (await client.get("/dashboard")).text
        assert "Prefiere aluminio 7075" in page
        assert "0.812" in page
        assert "Visitó Bilbao en 2024" in page
        assert "s-42" in page
        client.cookies.set("memory_dashboard", mint(uuid4()))
        other = (await client.get("/dashboard")).text
        assert "Prefiere aluminio 7075" not in other
        assert "No turn yet" in other


async def test_the_pages_work_from_the_keyboard(served: Served, page: Any) -> None:
    user = uuid4()
    await seed(served, user, ["Usa tornillos M6"])
    await sign_in(page, served, user)
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Skip to content"
    await page.keyboard.press("Enter")
    # Tab order from the content: the export link first, then the erase link.
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent.trim()") == "Export everything (JSON)"
    field = page.get_by_label("Corrected text")
    await field.focus()
    await field.fill("Usa tornillos M8")
    await page.keyboard.press("Enter")  # submits the correction form
    await page.wait_for_url("**/dashboard?done=corrected")
    assert await facts_of(served, user) == {"Usa tornillos M8": True, "Usa tornillos M6": False}


async def test_erase_from_the_dashboard_leaves_no_content_in_any_table(
    served: Served, pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any]
) -> None:
    user, other = uuid4(), uuid4()
    await fill_user(pg_memory, admin_conn, user)  # a row in every exported table
    await seed(served, other, ["Otro usuario usa titanio"])
    async with bare_app(served) as client:
        client.cookies.set("memory_dashboard", mint(user))
        confirm = (await client.get("/dashboard/erase")).text
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm)
        assert token is not None
        erased = await client.post("/dashboard/erase", data={"csrf": token.group(1), "confirm": "ERASE"})
        assert erased.status_code == 303
    # Left: what a user may read but not change, holding no content (row counters at zero, the write-rate bucket,
    # the operator's per-user limits); `memory-plugin erase`, the service path, removes them too.
    assert set(await rows_left(served, user)) <= {
        "memory_private.memory_usage",
        "memory_private.memory_write_buckets",
        "memory_private.memory_limits",
    }
    assert await facts_of(served, other) == {"Otro usuario usa titanio": True}
