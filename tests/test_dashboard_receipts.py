"""Past turns on the dashboard and the REST API: an agent turn run by one process (a `MemoryManager` that is then
closed) is shown by a server that runs no agent — `memory-plugin serve` after a restart — in headless Chromium,
and by `GET /api/memory/receipts`; another user sees none of it, whatever turn id is put in the URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import MemoryCapability, MemoryDeps, MemoryManager, MemorySettings
from memory_plugin.models import MemorizedFact, MemoryUpdate
from tests.test_dashboard import CHROMIUM, Served, bare_app, mint, page, seed, served, sign_in

__all__ = ["page", "served"]  # the fixtures, shared with tests/test_dashboard.py

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Van con rebabas; lo reviso.")])


async def a_turn_in_another_process(settings: MemorySettings, user: UUID) -> str:
    """One agent turn by a manager that is closed afterwards; returns the session id."""
    fact = MemorizedFact(
        content="Las hélices de carbono llegaron con rebabas", category="feedback", confidence=0.9, source="explicit"
    )
    session = f"turno-{uuid4().hex[:8]}"
    async with MemoryManager.open(settings) as memory:
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact]))
        agent = Agent(FunctionModel(answer), deps_type=MemoryDeps, capabilities=[MemoryCapability(memory)])
        await agent.run("¿Cómo vinieron las hélices de carbono?", deps=MemoryDeps(session_id=session, user_id=user))
        assert await memory.flush()
    return session


async def test_a_past_turn_is_shown_by_a_server_that_runs_no_agent(
    served: Served, page: Any, pg_settings: MemorySettings, tmp_path: Path
) -> None:
    user, other = uuid4(), uuid4()
    session = await a_turn_in_another_process(pg_settings, user)

    await sign_in(page, served, user)
    section = page.locator("section", has=page.get_by_role("heading", name="What the agent was given"))
    await section.scroll_into_view_if_needed()
    await page.screenshot(path=tmp_path / "receipt.png", full_page=True)
    shown = await section.inner_text()
    assert "Las hélices de carbono llegaron con rebabas" in shown
    assert "found for the message" in shown
    assert session in shown
    await section.get_by_role("link").first.click()
    assert "Las hélices de carbono llegaron con rebabas" in await section.inner_text()
    turn_url = page.url
    assert "turn=" in turn_url

    await page.context.clear_cookies()
    await sign_in(page, served, other)
    assert "No turn yet." in await section.inner_text()
    await page.goto(turn_url)  # the first user's turn id, as the other user
    body = await page.locator("main").inner_text()
    assert "rebabas" not in body
    assert session not in body


async def test_the_api_lists_the_signed_in_users_receipts_only(served: Served, pg_settings: MemorySettings) -> None:
    user, other = uuid4(), uuid4()
    session = await a_turn_in_another_process(pg_settings, user)
    async with httpx.AsyncClient(base_url=served.url) as client:
        mine = await client.get("/api/memory/receipts", headers={"Authorization": f"Bearer {mint(user)}"})
        theirs = await client.get("/api/memory/receipts", headers={"Authorization": f"Bearer {mint(other)}"})
        anonymous = await client.get("/api/memory/receipts")
    assert mine.status_code == 200
    [receipt] = mine.json()
    assert receipt["session_id"] == session
    [fact] = [f for f in receipt["injected"] if "rebabas" in f["content"]]
    assert fact["reason"] == "search"
    assert fact["score"] > 0
    assert receipt["tokens"]["total"] > 0
    assert theirs.json() == []
    assert anonymous.status_code == 401


async def test_stored_names_are_shown_by_their_human_names_in_both_languages(served: Served) -> None:
    user = uuid4()
    await seed(served, user, ["Vive en Zaragoza"])  # a fact, a preferred material, a goal slot, two summaries
    async with bare_app(served) as client:
        client.cookies.set("memory_dashboard", mint(user))
        english = (await client.get("/dashboard")).text
        client.cookies.set("memory_dashboard_lang", "es")
        spanish = (await client.get("/dashboard")).text
    assert "Preferred materials: aluminio 7075" in english
    assert "Materiales preferidos: aluminio 7075" in spanish
    assert ">Objetivo</th>" in spanish
    assert "extraído de los mensajes" in spanish
    for raw in ("preferred_materials", ">goal<", "· extractive ·", "· fact"):
        assert raw not in english
        assert raw not in spanish
