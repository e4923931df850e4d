"""`ShortTermFacade`: the facade's sessions (messages, entities, intents), the turn and the context it reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast
from uuid import UUID

from ..errors import InvalidMemoryInputError, MemoryPluginError
from ..formatting import format_memory_for_agent
from ..logs import LOG_PREFIX, logger
from ..models import MemoryContext, Message, ShortTermMemory
from ..validation import (
    MAX_ENTITY_CHARS,
    check_session_id,
    check_text,
    parse_user_id,
)

if TYPE_CHECKING:
    from ..context.builder import ContextBuilder
    from ..context.receipt import ContextReceipt
    from ..context.receipt_store import StoredReceipt
    from ..context.upkeep import MemorySource

from .core import FacadeCore

__all__ = ["ShortTermFacade"]


class ShortTermFacade(FacadeCore):
    """Short-term memory and context operations of `MemoryManager`."""

    # --- short-term memory ---------------------------------------------------------------------------------
    async def add_message(self, session_id: str, message: Message, *, user_id: str | UUID | None = None) -> int:
        """Record a message in the session's short-term memory (the last N are kept).

        Sessions are kept per user: `user_id` names the user's own session `session_id` (two users may each have
        a `chat-1`). Without `user_id` (the design's session-only call, after `get_memory_context(session_id,
        user_id)` bound the session) the message goes to the one live session with that id, or starts an
        anonymous one; when two owners use the id, `SessionAmbiguousError` asks for the user and nothing is
        written. Returns the number of messages the session has seen, which `should_extract` uses.
        """
        if self._closed:
            self._check_open()
        # The hot path (~2.5 µs a message in RAM): a session id is validated once, then remembered. The content
        # is scanned again (one regex pass): a `Message.model_construct` skips the model's own validator.
        if session_id not in self._valid_session_ids:
            self._remember_session_id(session_id)
        uid = user_id if user_id is None or type(user_id) is UUID else parse_user_id(user_id)
        if not isinstance(message, Message):
            raise InvalidMemoryInputError(f"message must be a Message, got {type(message).__name__}")
        check_text(message.content, "message content", self.settings.max_message_chars)
        self._messages_added += 1
        sessions = self._sessions
        if not sessions.blocking:
            return sessions.add_message(session_id, message, user_id=uid)
        return await self._session_calls.add_message(session_id, message, user_id=uid)

    def _remember_session_id(self, session_id: str) -> None:
        """Validate `session_id` (`check_session_id`) and remember it as valid; the memory of valid ids is
        bounded (emptied past 4,096 ids: at most one re-validation per id and 4,096 calls)."""
        check_session_id(session_id)
        if len(self._valid_session_ids) >= 4_096:
            self._valid_session_ids.clear()
        self._valid_session_ids.add(session_id)

    async def update_session_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: str | UUID | None = None
    ) -> None:
        """Merge extracted entities into the session, without duplicates (case- and accent-insensitive). The
        session's owner rule is `add_message`'s; past the per-session limits raises `SessionLimitError`."""
        self._check_open()
        check_session_id(session_id)
        uid = parse_user_id(user_id) if user_id is not None else None
        clean: dict[str, list[str]] = {}
        for kind, values in entities.items():
            if not isinstance(kind, str):
                raise InvalidMemoryInputError(f"entity kinds must be strings, got {kind!r}")
            items = [values] if isinstance(values, str) else list(values)
            for value in items:
                if not isinstance(value, str):
                    raise InvalidMemoryInputError(f"entity values must be strings, got {value!r} for {kind!r}")
                check_text(value, f"entity {kind!r}", MAX_ENTITY_CHARS)
            clean[check_text(kind, "entity kind", MAX_ENTITY_CHARS)] = items
        await self._session_calls.update_entities(session_id, clean, user_id=uid)

    async def update_session_intents(self, session_id: str, intent: str, *, user_id: str | UUID | None = None) -> None:
        """Record an intent detected in the session (the owner rule is `add_message`'s)."""
        self._check_open()
        check_session_id(session_id)
        uid = parse_user_id(user_id) if user_id is not None else None
        if not isinstance(intent, str) or not intent.strip():
            raise InvalidMemoryInputError("intent must be a non-empty string")
        intent = check_text(intent, "intent", MAX_ENTITY_CHARS)
        await self._session_calls.add_intent(session_id, intent, user_id=uid)

    async def get_short_term(self, session_id: str, *, user_id: str | UUID | None = None) -> ShortTermMemory:
        """The session's messages, entities and intents (empty when unknown or expired; the owner rule is
        `add_message`'s)."""
        self._check_open()
        uid = parse_user_id(user_id) if user_id is not None else None
        sid = check_session_id(session_id)
        return await self._session_calls.snapshot(sid, user_id=uid)

    def check_message(self, session_id: str, user_id: str | UUID | None, text: str) -> None:
        """Raise `InvalidMemoryInputError` now if a turn with `text` could not be recorded for this session and
        user (bad ids, text too long or not storable): what the capability checks before the model is called,
        so a turn that memory would refuse costs no model call."""
        self._check_open()
        check_session_id(session_id)
        if user_id is not None:
            parse_user_id(user_id)
        check_text(text, "message content", self.settings.max_message_chars)

    async def record_exchange(self, session_id: str, user_id: str | UUID | None, prompt: str, answer: str) -> bool:
        """Record a user prompt and the answer in the session (empty ones are skipped). Never raises for a
        memory problem: the answer exists already, so a failure is logged and counted
        (`stats.exchanges_not_recorded`) and False returned."""
        try:
            if prompt.strip():
                await self.add_message(session_id, Message(role="user", content=prompt), user_id=user_id)
            if answer.strip():
                await self.add_message(session_id, Message(role="assistant", content=answer), user_id=user_id)
        except MemoryPluginError as exc:
            self._exchanges_not_recorded += 1
            logger.warning("%s could not record the exchange in session %s: %s", LOG_PREFIX, session_id, exc)
            return False
        return True

    def should_extract(self, messages_seen: int) -> bool:
        """A plain count: True after every `extract_every_n_messages` messages of a session.

        Kept for callers that count messages themselves; the capability and the workflow use the extraction
        policy instead (`extract_if_due`), which batches, follows explicit triggers and skips small talk."""
        return messages_seen > 0 and messages_seen % self.settings.extract_every_n_messages == 0

    # --- context -----------------------------------------------------------------------------------------------
    async def get_memory_context(
        self, session_id: str, user_id: str | UUID | None = None, *, query: str | None = None
    ) -> MemoryContext:
        """The session's short-term state plus the user's most relevant long-term memory. With `user_id`, a new
        session is bound to that user (the start of a turn in the design's call order).

        If the long-term store cannot be read, `long_term_available` is False and the context holds
        short-term memory plus, with `ResilientStore`, the last copy of the user's long-term memory read
        before (`long_term_cached_at` says when); the formatted block says so. The failure is logged
        (throttled) and counted, not raised, unless `require_pg_memory`.
        With `query` (the current message) the facts are the ones `search` ranks best for it (relevance, then
        importance, confidence and recency), searched concurrently with the rest of the context; without, the
        user's most important, confident and recent facts. Rejections ("don't suggest X") are kept either way.
        If the search fails, the facts ranked without the query are used.
        """
        self._check_open()
        check_session_id(session_id)
        uid = parse_user_id(user_id) if user_id is not None else None
        # With a user, the turn starts here: an unknown session is bound to that user, so the session-only
        # calls that follow (`add_message(session_id, m)`) write this user's session.
        short = await self._session_calls.snapshot(session_id, user_id=uid, bind=True)
        if uid is None:
            return MemoryContext(session_id=session_id, short_term=short)
        return await self._context_reader.read(session_id, uid, short, query=query)

    async def context_builder(self) -> ContextBuilder:
        """The manager's context assembly (`context/builder.py`): one token budget for profile, slots, rolling
        summary, facts and history, slots and summaries kept current with the extraction. Opened on first use
        (on the manager's database, else in RAM) and closed with the manager."""
        self._check_open()
        async with self._context_lock:
            if self._context is None:
                from ..context.builder import ContextBuilder

                parts = self._assembly
                url = parts.library_url() if parts is not None and parts.connector else self._database_url
                pool = parts.pool() if parts is not None else None
                # Every part of the facade is a `MemoryManager`, which has `list_memory` (control.py) too.
                self._context = await ContextBuilder.open(
                    cast("MemorySource", self), self.settings, database_url=url, wait=False, pool=pool
                )
                self._context.follow(self._extraction)
        return self._context

    def keep_context_current(self, builder: ContextBuilder) -> None:
        """Keep `builder` (a context builder of your own; the manager's own follows from its first use) current
        with this manager's extraction: the facts its background jobs write patch the slots, and a summary due
        on a job is written in the job's own model call (`ContextBuilder.follow`). Only jobs that start after
        this call are followed, and a manager with a worker starts queued jobs as soon as it opens: a process
        that only runs jobs should use the manager's own builder (`await context_builder()` first thing, as
        `memory-plugin worker` does), which the jobs wait for while it opens."""
        builder.follow(self._extraction)

    def last_receipt(self, session_id: str, user_id: str | UUID | None = None) -> ContextReceipt | None:
        """What the last context built in this process for `session_id` and `user_id` held: facts injected and
        why, tokens per part, what was cut (`ContextReceipt`); None when none was built here."""
        return self._context.last_receipt(session_id, user_id) if self._context is not None else None

    async def receipts(self, user_id: str | UUID, *, limit: int = 20) -> list[StoredReceipt]:
        """What the agent was given on the user's past turns, newest first, whichever process ran them: the
        stored receipts (the newest 100 per user), facts with their current text."""
        return await (await self.context_builder()).store.receipts(parse_user_id(user_id), limit=limit)

    def format_memory_for_agent(self, context: MemoryContext) -> str:
        """The compact, fenced memory block for an agent's instructions ("" when nothing is known). Pure."""
        return format_memory_for_agent(context, self._format)
