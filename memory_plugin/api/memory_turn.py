"""The memory turn over HTTP, for clients that are not Python (a browser front end, another service): the same
`Turn` (`runtime/turn.py`) the capability and the workflow run.

- `POST /api/memory/context` (`Turn.start`): the budgeted context for the session of the signed-in user, before
  the client calls its model: `instructions` (what lasts: the agent's instructions), `turn_memory` (what this
  message chose: a system part of this request only), `summary` (the rolling summary, sent ahead of the
  history), `history` (the recent messages, pydantic-ai message JSON) and the `receipt` (facts given and why,
  tokens per part, what the budget cut). A new session is bound to the user.
- `POST /api/memory/turns` (`Turn.finish`): after the model answered, record the exchange, extract the facts now
  or queue them (the extraction policy decides whether any are due), and patch the slots and the summary. With
  an `Idempotency-Key` header a retried finish records the exchange once: the keys are kept in Postgres when the
  server has a pool (`turn_key_store.py`: any worker, after a restart), else in this process (`turn_keys.py`).

The user is always the bearer token's (a body naming a user is refused: 422); sessions are kept per user, so two
users' `chat-1` never meet. A paused memory refuses a finish with 423 (nothing recorded); reads work either way.

No `from __future__ import annotations` here: the routes are made inside `add_memory_turn`, and FastAPI reads
their annotations, which name the `user` dependency it is given, when they are defined.
"""

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

from fastapi import Depends, FastAPI, Header
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.messages import ModelMessagesTypeAdapter

from ..chats.idempotency import MAX_KEY_CHARS, AppendKey, request_hash
from ..errors import MemoryPausedError
from ..validation import MAX_SESSION_ID_CHARS
from .errors import ApiError
from .receipts import TurnReceiptOut, turn_receipt_out
from .schemas import MAX_TURN_CHARS, ErrorBody
from .turn_key_store import PostgresTurnKeys
from .turn_keys import TurnKeys

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..manager import MemoryManager
    from ..runtime.turn import TurnOutcome

__all__ = ["ContextIn", "ContextOut", "TurnFactOut", "TurnIn", "TurnOut", "add_memory_turn"]

_SESSION = Field(
    min_length=1,
    max_length=MAX_SESSION_ID_CHARS,
    description="The conversation, named by the client (the signed-in user's own: another user's id never meets it)",
)


class ContextIn(BaseModel):
    """The start of a turn: the session and the user's new message."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"session_id": "chat-1", "prompt": "¿Qué tornillos me recomiendas?"}]},
    )

    session_id: str = _SESSION
    prompt: str = Field(min_length=1, max_length=MAX_TURN_CHARS, description="The user's new message")


class ContextOut(BaseModel):
    """What to send the model for this turn (module docstring): instructions, then `turn_memory` as a system part
    of this request, then `summary` (if any) and `history`, then the user's message."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "session_id": "chat-1",
                    "instructions": "<memory>\nPreferences: material: titanium\n</memory>",
                    "turn_memory": "<memory-turn>\nRelevant facts:\n- The user prefers titanium screws\n</memory-turn>",
                    "summary": "",
                    "history": [
                        {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "Hola"}]},
                        {"kind": "response", "parts": [{"part_kind": "text", "content": "¡Hola!"}]},
                    ],
                    "receipt": {
                        "session_id": "chat-1",
                        "at": "2026-11-27T06:00:00Z",
                        "injected": [],
                        "in_slots": [],
                        "cut": [],
                        "tokens": {"slots": 12, "facts": 14, "messages": 9, "total": 61},
                        "messages_kept": 2,
                        "messages_dropped": 0,
                        "summary_cut": False,
                    },
                }
            ]
        }
    )

    session_id: str
    instructions: str
    """What lasts (profile, slots, rejections), fenced: the agent's instructions ("" when nothing is known). It
    stays the same from turn to turn while nothing lasting changes, so a provider's prompt cache keeps it."""
    turn_memory: str
    """What this message chose (relevant facts, projects, notices), fenced: a system part of this request only."""
    summary: str
    """The rolling summary of what the history no longer holds, titled ("" when none is sent)."""
    history: list[dict[str, Any]]
    """The recent messages to send, oldest first (pydantic-ai message JSON), cut to the budget at a safe point."""
    receipt: TurnReceiptOut | None
    """What this context holds and why; also kept for `GET /api/memory/receipts`."""


class TurnIn(BaseModel):
    """The end of a turn: the exchange to record."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "session_id": "chat-1",
                    "prompt": "Recuerda que prefiero tornillos de titanio",
                    "answer": "Anotado: tornillos de titanio.",
                }
            ]
        },
    )

    session_id: str = _SESSION
    prompt: str = Field(min_length=1, max_length=MAX_TURN_CHARS, description="The user's message")
    answer: str = Field(default="", max_length=MAX_TURN_CHARS, description="The assistant's answer")
    inline: bool | None = Field(
        default=None,
        description="Extract before answering (true: the facts are in the next context at once) or queue it for"
        " the background worker (false); unset: the server's setting (MEMORY_BACKGROUND_EXTRACTION)",
    )
    end_of_request: bool = Field(
        default=False, description="The conversation's request is complete: extract what is pending now"
    )


class TurnFactOut(BaseModel):
    """A fact the turn's extraction stored."""

    id: UUID
    category: str
    content: str


class TurnOut(BaseModel):
    """What the finish did."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "recorded": True,
                    "extraction": "inline",
                    "stored": [
                        {
                            "id": "0b6f4a52-6a2e-4c55-9d7e-1f1bb1f4c0a1",
                            "category": "preference",
                            "content": "The user prefers titanium screws",
                        }
                    ],
                    "job_id": None,
                    "error": None,
                }
            ]
        }
    )

    recorded: bool
    """The exchange is in the session (always true in a 200: a failure to record is a 503)."""
    extraction: Literal["inline", "queued", "none"]
    """Ran now (`stored` holds its facts), queued for the background worker (`job_id`), or none was due."""
    stored: list[TurnFactOut]
    job_id: int | None
    error: str | None
    """Why the facts could not be extracted or queued (the messages stay pending for the next trigger)."""


def _turn_out(outcome: "TurnOutcome") -> TurnOut:
    run, scheduled = outcome.extraction, outcome.scheduled
    inline = run is not None and run.trigger is not None
    queued = scheduled is not None and scheduled.job_id is not None
    return TurnOut(
        recorded=outcome.recorded,
        extraction="inline" if inline else "queued" if queued else "none",
        stored=[TurnFactOut(id=f.id, category=f.category, content=f.content) for f in run.stored] if run else [],
        job_id=scheduled.job_id if scheduled is not None else None,
        error=outcome.error,
    )


_FINISH_KEY = Header(
    alias="Idempotency-Key",
    min_length=1,
    max_length=MAX_KEY_CHARS,
    description=(
        "One per turn (e.g. a UUID), sent again with every retry of it: a retry after any failure (a 503, a"
        " timeout, a dropped connection) records the exchange once and answers with the first attempt's outcome."
        " The same key with another body is refused (422 `idempotency_key_reused`); while another worker runs the"
        " same key: 409 `turn_in_progress`, retry. Keys are kept 24 hours (in the database; without one, this"
        " process keeps the newest 10,000 finishes)."
    ),
)

_TURN_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "This server runs no memory turn"},
    422: {"model": ErrorBody, "description": "Invalid request (a bad session id, a message too long, a user id)"},
}


def add_memory_turn(
    app: FastAPI,
    manager: "MemoryManager | None",
    user: Callable[..., Awaitable[UUID]],
    keys: TurnKeys | None = None,
    pool: "AsyncConnectionPool[Any] | None" = None,
) -> None:
    """Add `POST /api/memory/context` and `POST /api/memory/turns` to `app`, running `manager`'s turns (None: both
    answer 404 `no_memory_turn`) for the user the `user` dependency returns (the bearer token's). With `pool`
    the finishes' idempotency keys are kept in its database (every worker sees them), else in `keys`."""
    known = keys if keys is not None else TurnKeys()
    ring = getattr(manager.store, "ring", None) if manager is not None else None  # opens sealed facts on replays
    durable = PostgresTurnKeys(pool, TurnOut, local=known, ring=ring) if pool is not None else None

    def memory() -> "MemoryManager":
        if manager is None:
            raise ApiError(404, "no_memory_turn", "this server runs no memory turn")
        return manager

    @app.post("/api/memory/context", response_model=ContextOut, tags=["memory"], responses=_TURN_ERRORS)
    async def memory_context(body: ContextIn, user_id: Annotated[UUID, Depends(user)]) -> ContextOut:
        """Start a turn: the budgeted context of the signed-in user's session for the new message (see the
        fields for where each part goes in the model request). Binds a new session to the user."""
        mm = memory()
        builder = await mm.context_builder()
        start = await mm.turn(body.session_id, user_id).start(body.prompt, context=builder, keep_prefix=True)
        built = start.built
        assert built is not None  # a turn started with a context builder reads the budgeted context
        return ContextOut(
            session_id=body.session_id,
            instructions=built.standing,
            turn_memory=built.turn,
            summary=built.summary_block,
            history=ModelMessagesTypeAdapter.dump_python(built.history, mode="json"),
            receipt=turn_receipt_out(start.receipt) if start.receipt is not None else None,
        )

    @app.post(
        "/api/memory/turns",
        response_model=TurnOut,
        tags=["memory"],
        responses={
            **_TURN_ERRORS,
            409: {"model": ErrorBody, "description": "Another worker runs this key's turn: retry in a few seconds"},
            423: {"model": ErrorBody, "description": "The user paused their memory: nothing was recorded"},
            503: {"model": ErrorBody, "description": "The exchange could not be recorded: retry with the same key"},
        },
    )
    async def memory_turn(
        body: TurnIn,
        user_id: Annotated[UUID, Depends(user)],
        idempotency_key: Annotated[str | None, _FINISH_KEY] = None,
    ) -> TurnOut:
        """Finish a turn: record the user's message and the answer in the session, extract the facts now or
        queue them (when the extraction policy says some are due), and update the slots and the summary. Send
        an `Idempotency-Key` header to make a retried finish record the exchange once."""
        mm = memory()
        mm.check_message(body.session_id, user_id, body.prompt)  # 422 before anything is recorded
        mm.check_message(body.session_id, user_id, body.answer)

        async def finish() -> TurnOut:
            if await mm.memory_paused(user_id):
                raise MemoryPausedError(
                    "this user's memory is paused: nothing of this turn was recorded (resume it with PUT"
                    ' /api/memory/pause {"paused": false})'
                )
            outcome = await mm.turn(body.session_id, user_id).finish(
                prompt=body.prompt,
                answer=body.answer,
                inline=body.inline,
                end_of_request=body.end_of_request,
                context=await mm.context_builder(),
            )
            return _turn_out(outcome)

        if idempotency_key is None:
            out = await finish()
        else:
            key = AppendKey(idempotency_key, request_hash(body.model_dump(mode="json")))
            once = durable.once if durable is not None else known.once
            out = await once(user_id, key, finish, lambda done: done.recorded)
        if not out.recorded:
            raise ApiError(503, "not_recorded", "the exchange could not be recorded now; retry (with the same key)")
        return out
