"""`ContextBuilder`: reads slots, summaries, facts and history for a turn, assembles them within the budget,
and (its `ContextUpkeep` half, `upkeep.py`) keeps slots and summaries up to date after the turn.

The I/O around the pure `assemble_context`. A capability calls `build` before the model request (memory
as instructions, the returned history as the messages) and `after_turn` once the exchange is recorded.
After a process restart, `build` for the same user resumes with the summary, the slots, the facts and
whatever recent history the caller still has, within the same budget (rehydration).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from opentelemetry import trace
from psycopg_pool import AsyncConnectionPool
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model

from ..errors import InvalidMemoryInputError, StoreError
from ..logs import LOG_PREFIX, logger
from ..models import MemoryContext, UserPreferences
from ..settings import MemorySettings
from ..validation import parse_user_id
from .budget import AssembledContext, BudgetSettings, ContextInputs, assemble_context
from .history import message_time, messages_from_session, part_text
from .receipt import ContextReceipt, receipt_for
from .slots import Slots, with_profile
from .store import (
    USER_SCOPE,
    ContextStore,
    InMemoryContextStore,
    PostgresContextStore,
    SummaryVersion,
    session_scope,
)
from .summarizer import RollingSummarizer
from .summary import SummaryPolicy
from .tokens import TokenCounter, token_counter
from .upkeep import ContextUpkeep, MemorySource

__all__ = ["ContextBuilder", "MemorySource", "budget_settings", "summary_policy"]


def budget_settings(settings: MemorySettings) -> BudgetSettings:
    """The budget from the settings."""
    return BudgetSettings(
        total_tokens=settings.context_budget_tokens,
        slots_tokens=settings.context_slots_tokens,
        summary_tokens=settings.context_summary_tokens,
        summary_pressure_tokens=min(settings.context_summary_pressure_tokens, settings.context_summary_tokens),
        min_recent_messages=settings.context_min_recent_messages,
    )


def summary_policy(settings: MemorySettings) -> SummaryPolicy:
    """When to rewrite the rolling summary, from the settings."""
    return SummaryPolicy(
        min_new_chars=settings.summary_min_new_chars,
        every_n_messages=settings.summary_every_n_messages,
        on_topic_change=settings.summary_on_topic_change,
        on_decision=settings.summary_on_decision,
        with_extraction=settings.summary_with_extraction,
        max_tokens=settings.context_summary_tokens,
        resync_after=timedelta(days=settings.summary_resync_days),
        health_notes=settings.health_notes,
    )


def _user_or_none(user_id: str | UUID | None) -> UUID | None:
    """The user id as a UUID; None when anonymous or not a UUID (`get_memory_context`, read alongside, reports
    a bad id)."""
    try:
        return parse_user_id(user_id) if user_id is not None else None
    except InvalidMemoryInputError:
        return None


def _notes(context: MemoryContext) -> list[str]:
    long = context.long_term
    notes = [f"project {p.timestamp.date().isoformat()}: {p.description} ({p.status})" for p in long.projects]
    notes += [f"frequent request: {p.description} (x{p.occurrences})" for p in long.patterns]
    return notes


_FILLED_USERS = 10_000
_KEPT_SESSIONS = 10_000
"""Anchors and receipts kept per process: at ~1 KB a receipt, 10 MB at most."""
_KEPT_HISTORIES = 1_000
"""Histories sent from the session kept per process (`_continued`): ~10 KB each at the default budget (16 shop
messages: 7 KB of message objects, and their text), 10 MB at most; a session beyond them restarts its history
once."""


def _remember(cache: OrderedDict[Any, Any], key: object, value: object, limit: int = _KEPT_SESSIONS) -> None:
    cache[key] = value
    cache.move_to_end(key)
    if len(cache) > limit:
        cache.popitem(last=False)


def _identity(message: ModelMessage) -> tuple[str, datetime | None, str]:
    """What tells a recorded message from another: a user prompt and its answer may share a timestamp."""
    return message.kind, message_time(message), "\x1e".join(part_text(p) for p in message.parts)


@dataclass(frozen=True)
class _Sent:
    """What a session's last build sent: where the history started, the instructions, and the summary."""

    start: datetime | None
    """When the history's first message was made (None: no history, or no timestamp)."""
    standing: str
    summary: str | None
    """The summary content given to the assembler (None: none sent)."""
    summary_block: str


@dataclass
class ContextBuilder(ContextUpkeep):
    """Builds each turn's context within the token budget and maintains slots and rolling summaries."""

    memory: MemorySource
    """The memory manager (facts, preferences, the session's messages)."""
    store: ContextStore
    """Where slots and summaries live."""
    counter: TokenCounter
    """Counts tokens for the model that will answer."""
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    """The budget."""
    summarizer: RollingSummarizer | None = None
    """Writes summaries; None: an extractive one (no model) with the default policy."""

    _anchors: OrderedDict[tuple[str, UUID | None], _Sent] = field(default_factory=OrderedDict, init=False, repr=False)
    """Per session and user, what the last build sent (bounded LRU)."""
    _reads: OrderedDict[tuple[str, UUID], tuple[float, dict[str, SummaryVersion]]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )
    """The summaries a build read, per session and user, with when (monotonic): the same turn's `after_turn`
    starts from them instead of reading them again (bounded LRU, taken once)."""
    _receipts: OrderedDict[tuple[str, UUID | None], ContextReceipt] = field(
        default_factory=OrderedDict, init=False, repr=False
    )
    """The last receipt per session and user (bounded LRU)."""
    _histories: OrderedDict[tuple[str, UUID | None], tuple[ModelMessage, ...]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )
    """Per session and user, the history the last build sent when it came from the session's recorded messages (the
    caller passed none): the next build continues it past the session's message window (bounded LRU)."""
    _unsaved: OrderedDict[tuple[str, UUID | None], ContextReceipt] = field(default_factory=OrderedDict, init=False)
    """Receipts built but not stored yet: `after_turn` stores them, off the request path."""
    _filled: OrderedDict[UUID, None] = field(default_factory=OrderedDict, init=False, repr=False)
    """Users whose empty slots were already filled from their facts by this process (bounded LRU), so a user
    whose facts fill no slot is not read again every turn."""

    def __post_init__(self) -> None:
        if self.summarizer is None:
            self.summarizer = RollingSummarizer(self.store, self.counter)

    @classmethod
    def from_settings(
        cls, memory: MemorySource, store: ContextStore, settings: MemorySettings, *, model: Model | str | None = None
    ) -> ContextBuilder:
        """A builder configured by `settings` (`model`, else `summary_model`, else `extraction_model`)."""
        counter = token_counter(settings.token_model or settings.agent_model)
        summarizer_model = model or settings.summary_model or settings.extraction_model
        summarizer = RollingSummarizer(store, counter, summarizer_model, summary_policy(settings))
        return cls(memory, store, counter, budget_settings(settings), summarizer)

    @classmethod
    async def open(
        cls,
        memory: MemorySource,
        settings: MemorySettings,
        *,
        database_url: str | None,
        model: Model | str | None = None,
        wait: bool = True,
        pool: AsyncConnectionPool[Any] | None = None,
    ) -> ContextBuilder:
        """A builder on the Postgres `pool` it is given (the manager's one pool), else on Postgres at
        `database_url` (its own small pool: `MemoryManager.database_url`), or in RAM when both are None (a
        manager on `InMemoryStore`). Close it with `close` (a pool handed in stays open). `wait=False`: do not
        wait for the first connection (a database down now is reported per turn)."""
        store: ContextStore = (
            PostgresContextStore(pool, ring=settings.key_ring())
            if pool is not None
            else await PostgresContextStore.connect(
                database_url,
                connect_timeout=settings.connect_timeout_seconds,
                wait=wait,
                pooler=settings.database_pooler,
            )
            if database_url
            else InMemoryContextStore()
        )
        return cls.from_settings(memory, store, settings, model=model)

    async def close(self) -> None:
        """Release the store's connections (nothing to do in RAM)."""
        await self.store.close()

    async def build(
        self,
        session_id: str,
        user_id: str | UUID | None,
        *,
        query: str | None = None,
        history: Sequence[ModelMessage] | None = None,
        prompt_tokens: int = 0,
        keep_prefix: bool = False,
    ) -> AssembledContext:
        """The context for the next request: memory as instructions, the clamped history, the report.

        `history`: the messages the caller passes (`message_history`); None: the session's recorded
        messages. `prompt_tokens`: what the new message costs, taken from the budget. `keep_prefix`: start
        the history where this session's previous build did while it fits (append-only requests keep the
        provider's prompt cache; the capability's choice). The report is logged and set on the current
        OpenTelemetry span (the agent run's, when the agent is instrumented) as `memory.context.*`
        attributes; the receipt is kept for `last_receipt`."""
        # The two reads are independent: one round trip of latency, not two in turn.
        uid = _user_or_none(user_id)
        context, (stored, summary) = await asyncio.gather(
            self.memory.get_memory_context(session_id, user_id, query=query), self._read_turn(uid, session_id)
        )
        # The profile is the stored preferences (`LongTermMemory.preferences`), shown as the profile slot.
        profile: UserPreferences = context.long_term.preferences
        slots = with_profile(await self._slots(uid, context, stored) if uid is not None else Slots(), profile)
        notice = None
        if not context.long_term_available:
            notice = "Long-term memory is temporarily unavailable; do not assume the user is new."
        messages = list(history) if history is not None else messages_from_session(context.short_term.messages)
        if keep_prefix and history is None:
            messages = self._continued((session_id, uid), messages)
        inputs = ContextInputs(
            profile=profile,
            slots=slots,
            summary=summary.content if summary else None,
            facts=context.long_term.facts,
            history=messages,
            notice=notice,
            notes=_notes(context),
            prompt_tokens=prompt_tokens,
            anchor=self._anchor((session_id, uid), messages) if keep_prefix else None,
        )
        previous = self._anchors.get((session_id, uid))
        assembled = None
        if inputs.anchor is not None and inputs.anchor >= 0 and previous is not None and summary is not None:
            # While the history keeps its start, the summary sent at that start stays: it covers what came
            # before the history, and a newer version only repeats messages the history still holds. So a
            # summary rewrite costs no cache miss until the history has to restart anyway.
            kept = assemble_context(dataclasses.replace(inputs, summary=previous.summary), self.counter, self.budget)
            if kept.anchored and (kept.standing, kept.summary_block) == (previous.standing, previous.summary_block):
                assembled = dataclasses.replace(kept, summary=summary.content)
        if assembled is None:
            assembled = self._assemble(inputs, summary)
            anchored = inputs.anchor is not None and inputs.anchor >= 0
            if anchored and previous is not None and previous.standing != assembled.standing:
                # The instructions changed (slots rewritten): the provider's cache misses this turn anyway, so the
                # history restarts now, with room to grow, instead of on a turn that would hit.
                assembled = self._assemble(dataclasses.replace(inputs, anchor=-1), summary)
        logger.debug("%s context for %s: %s", LOG_PREFIX, session_id, assembled.report.describe())
        trace.get_current_span().set_attributes(assembled.report.as_attributes())
        if keep_prefix:
            start = message_time(assembled.history[0]) if assembled.history else None
            sent = summary.content if summary is not None and assembled.summary_block else None
            if assembled.anchored and previous is not None and assembled.summary_block == previous.summary_block:
                sent = previous.summary
            _remember(self._anchors, (session_id, uid), _Sent(start, assembled.standing, sent, assembled.summary_block))
            if history is None:
                _remember(self._histories, (session_id, uid), tuple(assembled.history), _KEPT_HISTORIES)
            else:
                self._histories.pop((session_id, uid), None)
        receipt = receipt_for(session_id, uid, assembled, context.fact_scores, self.counter)
        _remember(self._receipts, (session_id, uid), receipt)
        if uid is not None:
            _remember(self._unsaved, (session_id, uid), receipt)
        return assembled

    def _continued(self, key: tuple[str, UUID | None], session: list[ModelMessage]) -> list[ModelMessage]:
        """The session's messages, led by the history this session's previous build sent when the session's window
        (its last 20 messages by default) no longer holds that history's start: the history then keeps its start
        until the token budget, not the window, forces a restart. Unchanged when nothing was sent from the
        session, the window still holds the start, or more messages came since than the window keeps (a gap)."""
        previous, sent = self._anchors.get(key), self._histories.get(key)
        if previous is None or not sent or previous.start is None:
            return session
        if any(message_time(m) == previous.start for m in session):
            return session
        last = _identity(sent[-1])
        at = next((i for i, m in enumerate(session) if _identity(m) == last), None)
        if at is None:
            return session
        return [*sent, *session[at + 1 :]]

    def _anchor(self, key: tuple[str, UUID | None], messages: Sequence[ModelMessage]) -> int | None:
        """Where this session's previous history started in `messages` (-1: no longer there; None: no
        previous build, or its first message had no timestamp)."""
        previous = self._anchors.get(key)
        if previous is None or previous.start is None:
            return None
        return next((i for i, m in enumerate(messages) if message_time(m) == previous.start), -1)

    def _assemble(self, inputs: ContextInputs, summary: SummaryVersion | None) -> AssembledContext:
        assembled = assemble_context(inputs, self.counter, self.budget)
        if summary is not None and summary.covered_from is not None:
            # When the history, given the summary's room, reaches back to the summary's first message, the
            # summary would only repeat the messages: leave it out.
            lean = assemble_context(dataclasses.replace(inputs, summary=None), self.counter, self.budget)
            oldest = message_time(lean.history[0]) if lean.history else None
            if oldest is not None and oldest <= summary.covered_from:
                # Compaction later in the run may still drop messages: it hands over the summary then.
                assembled = dataclasses.replace(lean, summary=summary.content)
        return assembled

    def last_receipt(self, session_id: str, user_id: str | UUID | None) -> ContextReceipt | None:
        """The receipt of the last context built in this process for `session_id` and `user_id` (None when
        none is kept: not built here, or evicted after 10,000 newer sessions)."""
        return self._receipts.get((session_id, _user_or_none(user_id)))

    async def _read_turn(self, uid: UUID | None, session_id: str) -> tuple[Slots | None, SummaryVersion | None]:
        """The user's stored slots and the summary the turn starts from: the session's, else the user's (what
        earlier sessions handed over); (None, None) when anonymous or when they cannot be read now (logged)."""
        if uid is None:
            return None, None
        scope = session_scope(session_id)
        try:
            slots, current = await self.store.read_turn(uid, (scope, USER_SCOPE))
        except StoreError as exc:
            logger.warning("%s slots and rolling summary unavailable for this turn: %s", LOG_PREFIX, exc)
            return None, None
        _remember(self._reads, (session_id, uid), (time.monotonic(), current))
        return slots, current.get(scope) or current.get(USER_SCOPE)

    async def _slots(self, uid: UUID, context: MemoryContext, stored: Slots | None) -> Slots:
        """The turn's slots from `stored` (read with the context): filled once from every current fact for a
        user known before the slots existed."""
        if stored is None:
            return Slots()
        if not stored.is_empty() or context.long_term.is_empty() or uid in self._filled:
            return stored
        try:
            slots = await self.resync_slots(uid)
        except StoreError as exc:
            logger.warning("%s slots unavailable for this turn: %s", LOG_PREFIX, exc)
            return Slots()
        self._filled[uid] = None
        if len(self._filled) > _FILLED_USERS:
            self._filled.popitem(last=False)
        return slots
