"""The dashboard's pages and forms, under `/dashboard` of the API app (`add_dashboard`).

Server-rendered HTML (Jinja2), plain forms, no script. Every read and write goes through the API's services
as the signed-in user (the stores' user-scoped calls and `UserData`), so row-level security decides what a
user sees: an id of someone else's fact or chat in a URL or a form is "not found", like an id that never existed.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs
from uuid import UUID

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from ..api.app import ApiServices
from ..api.auth import AuthenticationError
from ..api.download import export_download
from ..consent import memory_notice
from ..context.receipt import ContextReceipt
from ..context.receipt_store import StoredReceipt
from ..conversions import refuse_sealed
from ..crypto import is_sealed
from ..models import MemorizedFact
from ..privacy.policy import sanitize_fact_text
from ..rows import MemoryRecord
from ..write.items import fact_item
from .data import UserData
from .labels import label
from .session import LOGIN_COOKIE, SESSION_COOKIE, CsrfKeys, clear_cookie, set_cookie
from .strings import Language, pick_language, text

__all__ = ["add_dashboard"]

MAX_FACT_CHARS = 500
"""Longest corrected fact accepted: `MemorySettings.max_fact_chars`' default, the write path's limit."""

FACTS_PER_PAGE = 100
"""Current facts on one page: measured, a page of 1,000 facts is 1.6 MB of HTML (each has its correction
form); 100 keep it under 200 kB (`python -m bench.dashboard`)."""

RECEIPTS_LISTED = 20
"""Past turns listed under "what the agent was given" (the database keeps the newest 100)."""

SESSION_SECONDS = 3600
"""Cookie lifetime: Supabase's default access-token lifetime; the token's own `exp` still decides."""

_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
"""No script, no external resource: the pages are HTML and one inline stylesheet."""

_DONE = ("corrected", "deleted", "erased", "paused", "resumed")
_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass
class Dashboard:
    """What the dashboard serves from, besides the API's services."""

    api: ApiServices
    data: UserData
    dev_login: Callable[[UUID], str] | None = None
    """Mints a token for a user id (development sign-in); None: the development sign-in is refused."""
    receipts: Callable[[UUID], ContextReceipt | None] | None = None
    """The user's last context receipt in this process, when the agent runs here (shown while it is newer than
    the stored ones: a turn's receipt is stored after the turn); the stored ones are read from the database."""


def add_dashboard(
    app: FastAPI,
    services: ApiServices,
    pool: AsyncConnectionPool[Any],
    *,
    dev_login: Callable[[UUID], str] | None = None,
    receipts: Callable[[UUID], ContextReceipt | None] | None = None,
) -> None:
    """Serve the dashboard at `/dashboard` of `app`, over `services` and the API's `pool`."""
    ring = getattr(services.memory, "ring", None)  # a sealing store's keys open sealed facts in receipts
    app.include_router(_router(Dashboard(services, UserData(pool, ring=ring), dev_login, receipts)))


async def _receipt_shown(
    dash: Dashboard, user: UUID, past: list[StoredReceipt], turn: int | None
) -> ContextReceipt | None:
    """The receipt of the turn asked for (`?turn=<id>`, the user's own only), else the newest one: this process's
    last one while it is not stored yet, else the newest stored."""
    if turn is not None:
        chosen = next((r for r in past if r.id == turn), None)
        if chosen is None:
            found = await dash.data.receipts(user, limit=1, receipt_id=turn)
            chosen = found[0] if found else None
        return chosen.receipt if chosen is not None else None
    live = dash.receipts(user) if dash.receipts is not None else None
    if live is not None and (not past or live.at > past[0].receipt.at):
        return live
    return past[0].receipt if past else None


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (first value of each); no multipart parser needed for these forms."""
    parsed = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[0] for key, values in parsed.items()}


def _see(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


def _router(dash: Dashboard) -> APIRouter:
    router = APIRouter(prefix="/dashboard", include_in_schema=False)
    csrf = CsrfKeys()

    def language(request: Request) -> Language:
        return pick_language(request.cookies.get("memory_dashboard_lang"), request.headers.get("accept-language"))

    def page(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        lang = language(request)
        html = _TEMPLATES.get_template(template).render(
            t=lambda key, **kw: text(lang, key, **kw),
            label=lambda group, name: label(lang, group, name),
            lang=lang,
            notice=memory_notice(lang),
            **values,
        )
        response = HTMLResponse(html, status_code=status)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = _CSP
        return response

    async def signed_in(request: Request) -> tuple[UUID, str] | None:
        bearer = request.cookies.get(SESSION_COOKIE)
        if not bearer:
            return None
        try:
            return await dash.api.verifier.user_of(f"Bearer {bearer}"), bearer
        except AuthenticationError:
            return None

    def login_page(request: Request, error: str | None = None, status: int = 200) -> HTMLResponse:
        nonce = secrets.token_urlsafe(24)
        response = page(request, "login.html", status, nonce=nonce, error=error, dev=dash.dev_login is not None)
        set_cookie(request, response, LOGIN_COOKIE, nonce, 600)
        return response

    async def checked(request: Request) -> tuple[UUID, dict[str, str]] | Response:
        """The user of a form post with a valid CSRF token, or the response refusing it."""
        session = await signed_in(request)
        if session is None:
            return login_page(request, text(language(request), "expired"), 401)
        form = await _form(request)
        if not csrf.check(session[1], form.get("csrf")):
            return page(request, "message.html", 403, message=text(language(request), "bad_form"))
        return session[0], form

    def not_found(request: Request) -> HTMLResponse:
        return page(request, "message.html", 404, message=text(language(request), "not_found"))

    @router.get("", response_class=HTMLResponse)
    async def home(
        request: Request,
        done: str | None = None,
        n: int = 0,
        page_no: Annotated[int, Query(alias="page")] = 1,
        turn: int | None = None,
    ) -> Response:
        session = await signed_in(request)
        if session is None:
            return login_page(request)
        user, bearer = session
        records = refuse_sealed(await dash.api.memory.list_records(user, limit=1000)) if dash.api.memory else []
        chats, total = await dash.api.chats.list_chats(user, limit=100, offset=0)
        past = await dash.data.receipts(user, limit=RECEIPTS_LISTED)
        receipt = await _receipt_shown(dash, user, past, turn)
        consent = dash.api.consent
        return page(
            request,
            "memory.html",
            user=user,
            paused=await consent.paused(user) if consent is not None else None,
            csrf=csrf.for_session(bearer),
            done=done if done in _DONE else None,
            erased_rows=n,
            **_grouped(records, max(1, page_no)),
            slots=await dash.data.slots(user),
            summaries=await dash.data.summaries(user),
            chats=chats,
            chat_total=total,
            receipt=receipt,
            past_turns=past,
            turn=turn,
            export=dash.api.exporter is not None,
        )

    @router.get("/chats/{chat_id}", response_class=HTMLResponse)
    async def chat(request: Request, chat_id: str) -> Response:
        session = await signed_in(request)
        if session is None:
            return login_page(request, status=401)
        row = await dash.api.chats.get(session[0], chat_id_uuid) if (chat_id_uuid := _uuid(chat_id)) else None
        if row is None:
            return not_found(request)
        return page(request, "chat.html", chat=row, turns=_turn_lines(row.full_history))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await _form(request)
        if not _same_nonce(request, form):
            return login_page(request, text(language(request), "bad_form"), 403)
        bearer = form.get("token", "").strip()
        try:
            await dash.api.verifier.user_of(f"Bearer {bearer}")
        except AuthenticationError as exc:
            return login_page(request, text(language(request), "bad_token") + str(exc), 401)
        return _signed_in_redirect(request, bearer)

    @router.post("/dev-login")
    async def dev_login(request: Request) -> Response:
        form = await _form(request)
        if dash.dev_login is None:
            return page(request, "message.html", 403, message="development sign-in is off on this server")
        if not _same_nonce(request, form):
            return login_page(request, text(language(request), "bad_form"), 403)
        user = _uuid(form.get("user", "").strip())
        if user is None:
            return login_page(request, text(language(request), "bad_token") + "not a UUID", 422)
        return _signed_in_redirect(request, dash.dev_login(user))

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        outcome = await checked(request)
        if isinstance(outcome, Response):
            return outcome
        response = _see("/dashboard")
        clear_cookie(response, SESSION_COOKIE)
        return response

    @router.get("/language/{choice}")
    async def choose_language(request: Request, choice: str) -> Response:
        response = _see("/dashboard")
        if choice in ("en", "es"):
            response.set_cookie(
                "memory_dashboard_lang", choice, max_age=365 * 86400, path="/dashboard", samesite="lax", httponly=True
            )
        return response

    @router.post("/facts/{fact_id}/correct")
    async def correct(request: Request, fact_id: str) -> Response:
        outcome = await checked(request)
        if isinstance(outcome, Response):
            return outcome
        user, form = outcome
        lang = language(request)
        old = await dash.data.own_fact(user, fact_uuid) if (fact_uuid := _uuid(fact_id)) else None
        if old is None:
            return not_found(request)
        content = " ".join(form.get("content", "").split())
        if not content:
            return page(request, "message.html", 422, message=text(lang, "empty_text"))
        if len(content) > MAX_FACT_CHARS:
            return page(request, "message.html", 422, message=text(lang, "too_long", n=MAX_FACT_CHARS))
        clean = sanitize_fact_text(content, old.category)  # type: ignore[arg-type]  # a stored category
        if clean.text is None:
            return page(request, "message.html", 422, message=text(lang, "not_storable"))
        # A correction is a new version stated by the user, superseding the old one (kept as history).
        try:
            fact = MemorizedFact(
                content=clean.text,
                category=clean.category,
                confidence=1.0,
                source="explicit",
                importance=old.importance,
                replaces=old.id,
                user_id=user,
                sensitive=is_sealed(old.content),  # a correction of a sealed fact is sealed too
            )
        except ValidationError as exc:
            return page(request, "message.html", 422, message=str(exc.errors()[0]["msg"]))
        assert dash.api.memory is not None  # own_fact found it: this server serves memory
        await dash.api.memory.upsert(user, [fact_item(fact, None)])
        return _see("/dashboard?done=corrected")

    @router.post("/facts/{fact_id}/delete")
    async def delete(request: Request, fact_id: str) -> Response:
        outcome = await checked(request)
        if isinstance(outcome, Response):
            return outcome
        record = _uuid(fact_id)
        if record is None or dash.api.memory is None or not await dash.api.memory.delete(outcome[0], record):
            return not_found(request)
        return _see("/dashboard?done=deleted")

    @router.post("/pause")
    async def pause(request: Request) -> Response:
        outcome = await checked(request)
        if isinstance(outcome, Response):
            return outcome
        user, form = outcome
        if dash.api.consent is None:
            return not_found(request)
        paused = form.get("paused") == "1"
        await dash.api.consent.set_paused(user, paused)
        return _see(f"/dashboard?done={'paused' if paused else 'resumed'}")

    @router.get("/export")
    async def export(request: Request) -> Response:
        session = await signed_in(request)
        if session is None:
            return login_page(request, status=401)
        if dash.api.exporter is None:
            return not_found(request)
        return await export_download(dash.api.exporter, session[0])

    @router.get("/erase", response_class=HTMLResponse)
    async def erase_confirm(request: Request) -> Response:
        session = await signed_in(request)
        if session is None:
            return login_page(request, status=401)
        return page(request, "erase.html", csrf=csrf.for_session(session[1]), error=None)

    @router.post("/erase")
    async def erase(request: Request) -> Response:
        outcome = await checked(request)
        if isinstance(outcome, Response):
            return outcome
        user, form = outcome
        lang = language(request)
        if form.get("confirm", "").strip().upper() != text(lang, "erase_word"):
            bearer = request.cookies.get(SESSION_COOKIE, "")
            return page(request, "erase.html", 422, csrf=csrf.for_session(bearer), error=text(lang, "erase_wrong"))
        deleted = await dash.data.erase(user)
        return _see(f"/dashboard?done=erased&n={deleted}")

    def _same_nonce(request: Request, form: dict[str, str]) -> bool:
        cookie = request.cookies.get(LOGIN_COOKIE)
        return cookie is not None and secrets.compare_digest(cookie, form.get("nonce", ""))

    def _signed_in_redirect(request: Request, bearer: str) -> Response:
        response = _see("/dashboard")
        set_cookie(request, response, SESSION_COOKIE, bearer, SESSION_SECONDS)
        clear_cookie(response, LOGIN_COOKIE)
        return response

    return router


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


def _grouped(records: list[MemoryRecord], page_no: int) -> dict[str, Any]:
    """Rows by kind: one page of current facts, earlier versions, preferences, the rest."""
    now = datetime.now(UTC)
    facts = [r for r in records if r.kind == "fact"]
    current = [r for r in facts if r.is_current(now)]
    start = (page_no - 1) * FACTS_PER_PAGE
    return {
        "facts": current[start : start + FACTS_PER_PAGE],
        "fact_total": len(current),
        "fact_page": page_no,
        "fact_pages": max(1, -(-len(current) // FACTS_PER_PAGE)),
        "history": [r for r in facts if not r.is_current(now)],
        "preferences": [r for r in records if r.kind == "preference"],
        "others": [r for r in records if r.kind not in ("fact", "preference")],
    }


def _turn_lines(history: list[Any]) -> list[tuple[str, str]]:
    """(role, text) of each message's text parts, for reading a chat."""
    lines: list[tuple[str, str]] = []
    for message in history:
        for part in message.get("parts", []) if isinstance(message, dict) else []:
            kind = part.get("part_kind")
            if kind in ("user-prompt", "text") and isinstance(part.get("content"), str):
                lines.append(("user" if kind == "user-prompt" else "assistant", part["content"]))
    return lines
