"""The REST API: the signed-in user's chats and memory, every statement run as that user under RLS.

`create_app(ApiServices(...))` builds the FastAPI app; `memory-plugin serve` runs it with uvicorn. Routes:
`POST/GET /api/chats`, `GET/PATCH/DELETE /api/chats/{id}`, `GET /api/memory/records`, `GET /api/memory/export`,
`GET/PUT /api/memory/pause`, `GET /api/memory/receipts`, the memory turn `POST /api/memory/context` and
`POST /api/memory/turns` (`memory_turn.py`), and, without a token, `/healthz`, `/readyz` (`health.py`), `/docs`
(`docs.py`) and `/openapi.json`.
Errors always have the body `{"error": {"code", "message"}}`; someone else's chat is 404, exactly like a chat
that does not exist.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from uuid import UUID

import psycopg
from fastapi import Depends, FastAPI, Header, Query, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from psycopg_pool import AsyncConnectionPool
from pydantic_ai.messages import (
    ModelMessage,
)
from starlette.exceptions import HTTPException

from ..chats.idempotency import MAX_KEY_CHARS, MAX_KEYS_PER_CHAT, request_hash
from ..chats.rows import ChatHit, ChatRow
from ..chats.service import ChatService
from ..consent import ConsentStore, memory_notice
from ..context.receipt_store import read_receipts
from ..conversions import refuse_sealed
from ..errors import (
    IdempotencyKeyReusedError,
    MemoryLimitError,
    MemoryPausedError,
    MemoryPluginError,
    SessionOwnershipError,
    StoreUnavailableError,
)
from ..export.service import PoolExporter
from ..rows import MemoryKind
from ..store.base import LongTermStore
from . import health
from .auth import AuthenticationError, TokenVerifier
from .cors import add_cors
from .docs import add_docs
from .download import export_download
from .errors import ApiError
from .limits import DEFAULT_RATE_BURST, DEFAULT_RATE_PER_SECOND, BodySizeLimit, RateLimiter
from .memory_turn import add_memory_turn
from .messages import plain_error
from .receipts import ReceiptOut, receipt_out
from .schemas import (
    ChatCreate,
    ChatOut,
    ChatPage,
    ChatPatch,
    ChatPatchOut,
    ChatSearchResult,
    ChatSummaryOut,
    ErrorBody,
    MemorySwitch,
    MemorySwitchIn,
    RecordOut,
    Turn,
)
from .security import BEARER
from .turns import TurnRefused, check_text, client_turns

if TYPE_CHECKING:
    from ..manager import MemoryManager

__all__ = ["ApiServices", "create_app"]

logger = logging.getLogger("memory_plugin")

DEFAULT_MAX_BODY_BYTES = 1_000_000
"""Largest request body accepted: 200 turns of 5,000 characters fit."""

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No valid user token"},
    404: {"model": ErrorBody, "description": "No such chat for this user"},
    413: {"model": ErrorBody, "description": "Body too large"},
    422: {"model": ErrorBody, "description": "Invalid request"},
    429: {"model": ErrorBody, "description": "Request rate or a per-user limit reached (see Retry-After)"},
    503: {"model": ErrorBody, "description": "Database unavailable"},
}


_IDEMPOTENCY_KEY = Header(
    alias="Idempotency-Key",
    min_length=1,
    max_length=MAX_KEY_CHARS,
    description=(
        "One per logical append (e.g. a UUID), sent again with every retry of it: a retry after any failure (a"
        " 503, a timeout, a dropped connection) stores its turns once, and answers 200 with the chat as it is"
        f" now. The same key with another body is refused (422 `idempotency_key_reused`). A chat remembers its"
        f" {MAX_KEYS_PER_CHAT} newest keys."
    ),
)


_CREATE_KEY = Header(
    alias="Idempotency-Key",
    min_length=1,
    max_length=MAX_KEY_CHARS,
    description=(
        "One per logical create (e.g. a UUID), sent again with every retry of it: a retry after any failure (a"
        " 503, a timeout, a dropped connection) makes one chat, and answers 201 with that chat as it is now. The"
        " same key with another body is refused (422 `idempotency_key_reused`). A key is remembered as long as"
        " the chat it created exists."
    ),
)


@dataclass
class ApiServices:
    """What the API serves: chats, the long-term store (read routes), and the token check."""

    chats: ChatService
    verifier: TokenVerifier
    memory: LongTermStore | None = None
    exporter: PoolExporter | None = None
    """Streams the user's export (`GET /api/memory/export`); None: the route answers 404."""
    consent: ConsentStore | None = None
    """The user's memory switch (`GET/PUT /api/memory/pause`); None: the routes answer 404."""
    pool: AsyncConnectionPool[Any] | None = None
    """The pool the services share: the dashboard's own user-scoped statements run on it (`memory_plugin.dashboard`)."""
    manager: MemoryManager | None = None
    """Runs the memory turn (`POST /api/memory/context`, `POST /api/memory/turns`); None: those answer 404."""


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _turns(raw: Sequence[Turn]) -> list[ModelMessage]:
    """The messages to store for a request's turns (`turns.client_turns`), refusals as the API's 422."""
    try:
        return client_turns(raw)
    except TurnRefused as exc:
        raise ApiError(422, exc.code, exc.message) from exc


def _text(value: str | None, where: str) -> None:
    """Refuse a NUL or an unpaired surrogate in a text field (Postgres stores neither) with 422 `invalid_text`."""
    try:
        check_text(value, where)
    except TurnRefused as exc:
        raise ApiError(422, exc.code, exc.message) from exc


def _summary(row: ChatRow | ChatHit) -> ChatSummaryOut:
    return ChatSummaryOut(
        id=row.id,
        title=row.title,
        summary_text=row.summary_text,
        turn_count=row.turn_count,
        last_activity_at=row.last_activity_at,
    )


def _chat(row: ChatRow) -> ChatOut:
    return ChatOut(
        id=row.id,
        title=row.title,
        summary_text=row.summary_text,
        turn_count=row.turn_count,
        last_activity_at=row.last_activity_at,
        created_at=row.created_at,
        full_history=row.full_history,
        assistant_history=row.assistant_history,
    )


async def current_user(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None
) -> UUID:
    """The user of the request's bearer token (401 otherwise); `BEARER` puts the scheme in the OpenAPI schema."""
    services: ApiServices = request.app.state.services
    user = await services.verifier.user_of(request.headers.get("authorization"))
    limiter: RateLimiter = request.app.state.rate_limiter
    wait = limiter.wait(user)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        raise ApiError(
            429,
            "rate_limited",
            f"too many requests: at most {limiter.rate:g} a second after a burst of {limiter.burst}; retry in"
            f" {seconds} s",
            {"Retry-After": str(seconds)},
        )
    return user


# Module level: FastAPI resolves the (postponed) annotations of the routes in this module's globals.
User = Annotated[UUID, Depends(current_user)]


def create_app(
    services: ApiServices,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    cors_origins: Sequence[str] = (),
    rate_per_second: float = DEFAULT_RATE_PER_SECOND,
    rate_burst: int = DEFAULT_RATE_BURST,
) -> FastAPI:
    """The FastAPI app serving `services`; `cors_origins`: browser origins allowed to call it (none: no CORS);
    `rate_per_second` / `rate_burst`: each user's request rate (`limits.RateLimiter`; 0: no limit)."""
    app = FastAPI(title="memory_plugin API", version="1", responses=_ERRORS, docs_url=None, redoc_url=None)
    app.state.services = services
    app.state.rate_limiter = RateLimiter(rate_per_second, rate_burst)
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    add_cors(app, cors_origins)  # added last: outermost, so preflights and error answers carry its headers
    add_docs(app)
    app.include_router(health.router)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(AuthenticationError)
    async def auth_error(request: Request, exc: AuthenticationError) -> JSONResponse:
        return _error(401, "unauthorized", str(exc), {"WWW-Authenticate": "Bearer"})

    @app.exception_handler(StoreUnavailableError)
    async def unavailable(request: Request, exc: StoreUnavailableError) -> JSONResponse:
        return _error(503, "database_unavailable", "the database is unavailable; retry shortly")

    @app.exception_handler(IdempotencyKeyReusedError)
    async def key_reused(request: Request, exc: IdempotencyKeyReusedError) -> JSONResponse:
        return _error(422, "idempotency_key_reused", str(exc))

    @app.exception_handler(MemoryLimitError)
    async def limit_reached(request: Request, exc: MemoryLimitError) -> JSONResponse:
        # A count per user (chats, …) or the write rate, enforced by the library or the database.
        wait = None if exc.retry_after is None else str(max(1, math.ceil(exc.retry_after)))
        return _error(429, "limit_reached", str(exc), {"Retry-After": wait} if wait else None)

    @app.exception_handler(MemoryPausedError)
    async def memory_paused(request: Request, exc: MemoryPausedError) -> JSONResponse:
        # The user paused their memory (PUT /api/memory/pause): the database refused the write (PT423).
        return _error(423, "memory_paused", str(exc))

    @app.exception_handler(SessionOwnershipError)
    async def not_your_session(request: Request, exc: SessionOwnershipError) -> JSONResponse:
        # Like someone else's chat: answered as a session that does not exist.
        return _error(404, "session_not_found", str(exc))

    @app.exception_handler(MemoryPluginError)
    async def plugin_error(request: Request, exc: MemoryPluginError) -> JSONResponse:
        logger.warning("API request failed: %s", exc)
        return _error(422, "rejected", str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"msg": "invalid request", "loc": ()}
        return _error(422, "invalid_request", plain_error(first))

    @app.exception_handler(UnicodeError)
    async def bad_text(request: Request, exc: UnicodeError) -> JSONResponse:
        return _error(422, "invalid_text", "the request holds text that is not valid UTF-8: send valid UTF-8 text")

    @app.exception_handler(psycopg.DataError)
    async def bad_data(request: Request, exc: psycopg.DataError) -> JSONResponse:
        # Postgres's own message quotes the statement: logged, never answered.
        logger.warning("API request refused by the database: %s", type(exc).__name__)
        return _error(422, "invalid_text", "the database cannot store a value of this request (a NUL or invalid text)")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, "http_error", str(exc.detail))

    add_memory_turn(app, services.manager, current_user, pool=services.pool)

    async def own_chat(user: UUID, chat_id: UUID) -> ChatRow:
        row = await services.chats.get(user, chat_id)
        if row is None:
            raise ApiError(404, "chat_not_found", "no such chat")
        return row

    @app.post("/api/chats", status_code=201, response_model=ChatOut, tags=["chats"])
    async def create_chat(
        body: ChatCreate, user: User, idempotency_key: Annotated[str | None, _CREATE_KEY] = None
    ) -> ChatOut:
        """Start a chat (optionally with a title and first turns). Send an `Idempotency-Key` header to make a
        retried create make one chat."""
        _text(body.title, "title")
        turns = _turns(body.turns)
        # The body as sent (as for PATCH): converted turns are stamped with the time of their conversion.
        same = request_hash(body.model_dump(mode="json")) if idempotency_key is not None else None
        row = await services.chats.create(
            user, title=body.title, turns=turns, idempotency_key=idempotency_key, request_hash=same
        )
        return _chat(row)

    @app.get("/api/chats", response_model=ChatPage | ChatOut | ChatSearchResult, tags=["chats"])
    async def list_chats(
        user: User,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
        id: Annotated[UUID | None, Query(description="one chat, with its histories")] = None,
        search: Annotated[str | None, Query(min_length=1, max_length=500, description="find a chat by topic")] = None,
    ) -> ChatPage | ChatOut | ChatSearchResult:
        """The user's chats: a page, one chat (`?id=`), or a search (`?search=`)."""
        if id is not None:
            return _chat(await own_chat(user, id))
        if search is not None:
            _text(search, "query parameter search")
            match = await services.chats.find(user, search)
            return ChatSearchResult(
                chosen=_summary(match.chosen) if match.chosen else None,
                candidates=[_summary(h) for h in match.candidates],
            )
        rows, total = await services.chats.list_chats(user, limit=limit, offset=offset)
        return ChatPage(items=[_summary(r) for r in rows], total=total, limit=limit, offset=offset)

    @app.get("/api/chats/{chat_id}", response_model=ChatOut, tags=["chats"])
    async def get_chat(chat_id: UUID, user: User) -> ChatOut:
        """One chat with both histories."""
        return _chat(await own_chat(user, chat_id))

    @app.patch("/api/chats/{chat_id}", response_model=ChatPatchOut, tags=["chats"])
    async def patch_chat(
        chat_id: UUID,
        body: ChatPatch,
        user: User,
        idempotency_key: Annotated[str | None, _IDEMPOTENCY_KEY] = None,
    ) -> ChatPatchOut:
        """Append turns (compaction runs when needed) and/or rename the chat. Send an `Idempotency-Key` header
        to make a retried append store its turns once. Answers with what changed (the appended turns), not the
        whole chat: its cost stays that of the request however long the chat grows."""
        _text(body.title, "title")
        turns = _turns(body.turns)
        # The writes answer "no such chat" themselves, and the append returns the chat after it (compacted,
        # summarised): a read is needed only when nothing was appended.
        if body.title is not None and not await services.chats.rename(user, chat_id, body.title):
            raise ApiError(404, "chat_not_found", "no such chat")
        appended = None
        if turns:
            # The body as sent, not the converted turns: a plain turn becomes a message stamped with the time of
            # its conversion, which differs between a request and its retry.
            same = request_hash(body.model_dump(mode="json"))
            appended = await services.chats.append(
                user, chat_id, turns, idempotency_key=idempotency_key, request_hash=same
            )
        row = appended or await own_chat(user, chat_id)
        return ChatPatchOut(
            id=row.id,
            title=row.title,
            summary_text=row.summary_text,
            turn_count=row.turn_count,
            last_activity_at=row.last_activity_at,
            created_at=row.created_at,
            # `full_history` is append-only: this request's turns are its last ones.
            appended=row.full_history[-len(turns) :] if turns else [],
            assistant_turn_count=len(row.assistant_history),
        )

    @app.delete("/api/chats/{chat_id}", status_code=204, tags=["chats"])
    async def delete_chat(chat_id: UUID, user: User) -> Response:
        """Delete a chat."""
        if not await services.chats.delete(user, chat_id):
            raise ApiError(404, "chat_not_found", "no such chat")
        return Response(status_code=204)

    @app.get("/api/memory/records", response_model=list[RecordOut], tags=["memory"])
    async def memory_records(
        user: User,
        kind: Annotated[MemoryKind | None, Query(description="fact, preference, project, …")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[RecordOut]:
        """The user's stored memory (facts, preferences, project notes), newest first."""
        if services.memory is None:
            raise ApiError(404, "no_memory_store", "this server serves no long-term memory")
        records = refuse_sealed(await services.memory.list_records(user, kind=kind, limit=limit))
        return [
            RecordOut(
                id=r.id,
                kind=r.kind,
                category=r.category,
                content=r.content,
                confidence=r.confidence,
                importance=r.importance,
                created_at=r.created_at,
                sensitive=r.sensitive,
            )
            for r in records
        ]

    @app.get(
        "/api/memory/export",
        tags=["memory"],
        response_class=StreamingResponse,
        responses={200: {"content": {"application/json": {}}, "description": "The export (docs/export.md)"}},
    )
    async def memory_export(user: User) -> StreamingResponse:
        """Everything stored about the signed-in user, as one versioned JSON document (streamed)."""
        if services.exporter is None:
            raise ApiError(404, "no_export", "this server serves no export")
        return await export_download(services.exporter, user)

    @app.get("/api/memory/receipts", response_model=list[ReceiptOut], tags=["memory"])
    async def memory_receipts(user: User, limit: Annotated[int, Query(ge=1, le=100)] = 20) -> list[ReceiptOut]:
        """What the agent was given on the signed-in user's recent turns (newest first): facts injected and why,
        tokens per part, what the budget cut. The newest 100 turns are kept."""
        if services.pool is None:
            raise ApiError(404, "no_receipts", "this server serves no receipts")
        ring = getattr(services.memory, "ring", None)  # a sealing store's keys open sealed fact texts
        return [receipt_out(r) for r in await read_receipts(services.pool, user, limit=limit, ring=ring)]

    def consent() -> ConsentStore:
        # With a memory turn, its manager's switch: one per process, so the turn's own check sees a change at once
        # (a switch reuses what it read for 2 s: `consent.CACHE_SECONDS`).
        switch = services.manager.memory_switch if services.manager is not None else services.consent
        if switch is None:
            raise ApiError(404, "no_memory_switch", "this server serves no memory switch")
        return switch

    @app.get("/api/memory/pause", response_model=MemorySwitch, tags=["memory"])
    async def memory_switch(user: User) -> MemorySwitch:
        """Whether the signed-in user's memory is paused (nothing new stored), and the notice to show them."""
        return MemorySwitch(paused=await consent().paused(user), notice=memory_notice("en"))

    @app.put("/api/memory/pause", response_model=MemorySwitch, tags=["memory"])
    async def set_memory_switch(body: MemorySwitchIn, user: User) -> MemorySwitch:
        """Pause (`{"paused": true}`) or resume the signed-in user's memory; reads work either way."""
        await consent().set_paused(user, body.paused)
        return MemorySwitch(paused=body.paused, notice=memory_notice("en"))

    return app
