"""`MemoryManager`: the one object an application talks to.

A facade over services with one job each, sharing one long-term store:

- `ContextReader` (`context/reader.py`): the session's state plus the user's long-term memory;
- `WritePipeline` (`write/pipeline.py`): admission, sanitising, folding, embedding and upserting writes;
- `ExtractionRunner` (`extraction/runner.py`): when and how facts are extracted from a session;
- `Searcher` (`retrieval/searcher.py`): query-aware search.

It validates input, owns the lifecycle (connect, migrate, replay, sweep expired sessions, close) and sums the
services' counters in `stats`:

    async with MemoryManager.open() as memory:  # no settings: the embedded default database
        ctx = await memory.get_memory_context(session_id, user_id)
        prompt_block = memory.format_memory_for_agent(ctx)
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence, Sized
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from .background import BackgroundWorker, JobQueue, QueueStatus
from .background.jobs import ExtractionJob
from .consent import ConsentStore
from .context.reader import ContextReader
from .conversions import fact_from_record
from .database.urls import masked_url
from .embeddings import MemoryEmbedder, default_embedder
from .embeddings.reembed import reembed_user
from .errors import InvalidMemoryInputError, ManagerClosedError, MemoryPausedError, MemoryPluginError
from .export import ImportReport, export_from_url, import_into_url
from .extraction import FactExtractor, default_extractor
from .extraction.policy import ExtractionPolicy, ExtractionRun
from .extraction.runner import ExtractionRunner, ScheduledExtraction
from .failures import StoreFailures
from .formatting import MemoryFormat, format_memory_for_agent
from .logs import LOG_PREFIX, logger
from .models import FactCategory, MemorizedFact, MemoryContext, MemoryUpdate, Message, ShortTermMemory
from .quality import WriteOutcome
from .quality.outcome import NoteBatchOutcome
from .retrieval import ScoredMemory
from .retrieval.searcher import Searcher
from .rows import CONTENT_MAX_CHARS, MemoryRecord
from .runtime.assembly import Assembly, assemble
from .runtime.connector import DatabaseConnector
from .runtime.supervisor import Supervisor
from .runtime.turn import TurnOutcome, finish_turn
from .session import Clock, SessionBackend, SessionStore, off_the_loop
from .settings import MemorySettings
from .stats import MemoryStats
from .store import ContextQuery, LongTermStore
from .store.status import BackendStatus
from .validation import (
    MAX_ENTITY_CHARS,
    check_session_id,
    check_text,
    parse_item_id,
    parse_user_id,
)
from .write.notes import Note
from .write.pipeline import WritePipeline

if TYPE_CHECKING:
    from .context.builder import ContextBuilder
    from .context.receipt import ContextReceipt

__all__ = ["MemoryManager", "MemoryStats"]


class MemoryManager:
    """Short-term sessions and long-term user memory for agents.

    Build with `MemoryManager.open(settings)` (an async context manager; settings optional) or
    `await MemoryManager.create(...)` plus `await memory.close()`. Every method that touches memory is
    awaited; `format_memory_for_agent` is pure.
    """

    def __init__(
        self,
        settings: MemorySettings,
        store: LongTermStore,
        *,
        extractor: FactExtractor | None = None,
        clock: Clock | None = None,
        database_url: str | None = None,
        embedder: MemoryEmbedder | None = None,
        sessions: SessionBackend | None = None,
    ) -> None:
        settings.check_content_limit(CONTENT_MAX_CHARS)  # a limit the schema cannot hold fails here, not per write
        self.settings = settings
        self.store = store
        self.embedder = embedder if embedder is not None else default_embedder(settings)
        """Embeds facts at write time and questions at search time (None: text-only search)."""
        self.sessions: SessionBackend = (
            sessions if sessions is not None else SessionStore.from_settings(settings, clock=clock or time.monotonic)
        )
        self.failures = StoreFailures(settings.outage_log_interval_seconds)
        """Long-term reads that failed, counted and logged (throttled)."""
        self.searcher = Searcher(settings, store, self.embedder)
        """Query-aware search."""
        self.context_reader = ContextReader(settings, store, self.searcher, self.failures)
        """Reads the context given to an agent."""
        self.writer = WritePipeline(settings, store, self.embedder)
        """Every write to long-term memory."""
        self.extraction = ExtractionRunner(
            settings,
            extractor or default_extractor(settings.extraction_model),
            self.sessions,
            self.writer,
            store,
            self.failures,
            ContextQuery(
                max_facts=settings.extraction_candidate_facts,
                max_projects=0,
                max_patterns=0,
                weights=self.context_reader.weights,
            ),
        )
        """Extraction of lasting facts from sessions."""
        self._format = MemoryFormat(
            recent_messages=settings.recent_messages_in_prompt,
            message_chars=settings.message_chars_in_prompt,
            max_block_chars=settings.max_memory_block_chars,
        )
        self._closed = False
        self._messages_added = 0
        self._valid_session_ids: set[str] = set()
        """Session ids `check_session_id` accepted (`_remember_session_id`)."""
        self._supervisor = Supervisor(settings, self._run_job)
        """The work off the request path: job queue, worker, tasks, session sweeper (`runtime/supervisor.py`)."""
        self.consent = ConsentStore(database_url)
        """The users' memory switch (`pause_memory`): in the database, or in this process without one."""
        self._exchanges_not_recorded = 0
        self._database_url = database_url
        self._connector: DatabaseConnector | None = None
        self._assembly: Assembly | None = None
        self._context: ContextBuilder | None = None
        self._context_lock = asyncio.Lock()

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("this MemoryManager is closed; open a new one with MemoryManager.open()")

    @property
    def closed(self) -> bool:
        """Whether `close` was called: every memory operation then raises `ManagerClosedError`."""
        return self._closed

    @property
    def extractor(self) -> FactExtractor:
        """The fact extractor (a model, or the offline rules)."""
        return self.extraction.extractor

    @property
    def policy(self) -> ExtractionPolicy:
        """When extraction runs (triggers, cadence)."""
        return self.extraction.policy

    def extracts_inline(self, choice: bool | None = None) -> bool:
        """Whether an extraction runs before a turn returns (True) or is queued for the background worker:
        `choice` when given (a capability's or workflow's `extract_inline`), else the settings'
        (`not background_extraction`: queued by default)."""
        return choice if choice is not None else not self.settings.background_extraction

    @property
    def stats(self) -> MemoryStats:
        """Counters since the manager opened (a snapshot: read it again after more calls)."""
        return MemoryStats.collect(
            self.writer.stats,
            self.writer.admission.stats,
            self.extraction.stats,
            self.searcher.stats,
            self.failures,
            _Messages(self._messages_added, self._exchanges_not_recorded),
        )

    # --- lifecycle ---------------------------------------------------------------------------------------
    @classmethod
    async def create(
        cls,
        settings: MemorySettings | None = None,
        *,
        store: LongTermStore | None = None,
        extractor: FactExtractor | None = None,
        clock: Clock | None = None,
        embedder: MemoryEmbedder | None = None,
    ) -> MemoryManager:
        """Connect (starting the embedded Postgres when no `database_url` is set), migrate, and return a
        ready manager. Pass `store=InMemoryStore()` for a database-free manager (tests); a store passed in
        is used as is.

        The store created here is wrapped in `ResilientStore` (unless `resilient_store=False`): if the
        database is unreachable, the manager starts in fallback mode and keeps trying in the background,
        unless `require_pg_memory`, which raises `StoreUnavailableError` instead.
        """
        settings = settings or MemorySettings()
        parts = await assemble(settings, store=store)
        manager = cls(
            settings, parts.store, extractor=extractor, clock=clock, embedder=embedder, sessions=parts.sessions
        )
        manager._assembly = parts
        manager._connector = parts.connector
        if parts.connector is not None and parts.connector.url is not None:
            # On the one pool (the store's role); a database down at start: a pool of its own, same role.
            pool = parts.pool()
            url = None if pool is not None else parts.library_url()
            manager.consent = ConsentStore(url, pool=pool, timeout=settings.connect_timeout_seconds)
        manager._supervisor.start_sweeper(manager.sessions)
        try:
            await manager._supervisor.start(parts.library_url(), parts.pool())
        except BaseException:
            await manager.close()
            raise
        return manager

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: MemorySettings | None = None,
        *,
        store: LongTermStore | None = None,
        extractor: FactExtractor | None = None,
        clock: Clock | None = None,
        embedder: MemoryEmbedder | None = None,
    ) -> AsyncIterator[MemoryManager]:
        """`async with MemoryManager.open(settings) as memory:` — see `create`; closes on exit. `embedder`
        overrides the one `settings.embedding_model` chooses."""
        manager = await cls.create(settings, store=store, extractor=extractor, clock=clock, embedder=embedder)
        try:
            yield manager
        finally:
            await manager.close()

    async def close(self) -> None:
        """Stop background work and close the store's connections. The embedded server, if any, keeps
        running until the process exits (other managers in the process may share it)."""
        self._closed = True
        await self._supervisor.close()
        self.sessions.close()
        if self._context is not None:
            await self._context.close()
        await self.consent.close()
        await self.store.close()

    # --- background extraction (docs/background.md): the supervisor's (runtime/supervisor.py) ---------------------
    async def _run_job(self, job: ExtractionJob, queue: JobQueue, worker: str) -> None:
        """A queued extraction, unless its user paused memory since it was queued (then it is done, unwritten)."""
        if await self.consent.paused(job.user_id):
            async with queue.hold(job, worker):
                pass  # a clean exit completes (removes) the job: left leased, it would run again at every lease end
            return
        await self.extraction.run_job(job, queue, worker)

    def _background(self) -> tuple[JobQueue, BackgroundWorker | None]:
        return self._supervisor.background()

    async def schedule_extraction(
        self, session_id: str, user_id: str | UUID, *, end_of_request: bool = False
    ) -> ScheduledExtraction:
        """Queue one batched extraction if the extraction policy says so (as `extract_if_due` decides), and
        return at once: a background worker extracts and stores the facts. Until it has, the next turn does
        not see them (`flush()` waits for it; docs/background.md). When the queue is full the messages stay
        pending in the session for its next trigger (`outcome == "full"`)."""
        self._check_open()
        uid = parse_user_id(user_id)
        if await self.consent.paused(uid):
            return ScheduledExtraction()
        queue, _ = self._background()
        scheduled = await self.extraction.schedule(
            queue, check_session_id(session_id), uid, end_of_request=end_of_request
        )
        if scheduled.job_id is not None:
            self._supervisor.queued(scheduled.job_id)
        return scheduled

    async def flush(self, timeout: float = 30.0) -> bool:  # noqa: ASYNC109 - a deadline is the point of flush
        """Wait until the background work this manager queued so far is done, at most `timeout` seconds;
        returns whether it all is. Facts extracted in the background become visible to reads only once
        written: call this to close that window (scripts, tests, before exiting). A job that failed and waits
        for its retry does not hold `flush` (it counts in `backend_status().queue.retrying`). With
        `background_worker=False` another process runs the jobs; `flush` waits for it all the same."""
        self._check_open()
        return await self._supervisor.flush(timeout)

    def run_in_background(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run `work` off the request path in this process, for derived memory the next turn or a resync
        rebuilds if it is lost (the context's slots and rolling summary): not durable, unlike extraction jobs.
        `flush` waits for it, `close` too (then cancels what is left after its deadline); a
        `MemoryPluginError` it raises is logged, never lost silently."""
        self._check_open()
        self._supervisor.run_in_background(work, name=name)

    async def queue_status(self) -> QueueStatus:
        """The background extraction queue now: depth, oldest pending job, failures, retries, dead jobs."""
        self._check_open()
        queue, _ = self._background()
        status = await queue.status()
        return dataclasses.replace(status, refused=self.extraction.jobs_refused)

    async def retry_dead_jobs(self, user_id: str | UUID | None = None) -> int:
        """Queue the dead background jobs again (all, or the user's), with fresh attempts; returns how many."""
        self._check_open()
        queue, worker = self._background()
        revived = await queue.retry_dead(parse_user_id(user_id) if user_id is not None else None)
        if worker is not None:
            worker.notify()
        return revived

    @property
    def database_url(self) -> str | None:
        """The Postgres in use (open it with `psql`), or None for a non-Postgres store (and, for the
        embedded default, until its server has started)."""
        if self._connector is not None:
            return self._connector.url
        return self._database_url

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
        sessions = self.sessions
        if not sessions.blocking:
            return sessions.add_message(session_id, message, user_id=uid)
        return await off_the_loop(sessions, lambda: sessions.add_message(session_id, message, user_id=uid))

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
        await off_the_loop(self.sessions, lambda: self.sessions.update_entities(session_id, clean, user_id=uid))

    async def update_session_intents(self, session_id: str, intent: str, *, user_id: str | UUID | None = None) -> None:
        """Record an intent detected in the session (the owner rule is `add_message`'s)."""
        self._check_open()
        check_session_id(session_id)
        uid = parse_user_id(user_id) if user_id is not None else None
        if not isinstance(intent, str) or not intent.strip():
            raise InvalidMemoryInputError("intent must be a non-empty string")
        intent = check_text(intent, "intent", MAX_ENTITY_CHARS)
        await off_the_loop(self.sessions, lambda: self.sessions.add_intent(session_id, intent, user_id=uid))

    async def get_short_term(self, session_id: str, *, user_id: str | UUID | None = None) -> ShortTermMemory:
        """The session's messages, entities and intents (empty when unknown or expired; the owner rule is
        `add_message`'s)."""
        self._check_open()
        uid = parse_user_id(user_id) if user_id is not None else None
        sid = check_session_id(session_id)
        return await off_the_loop(self.sessions, lambda: self.sessions.snapshot(sid, user_id=uid))

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

    async def finish_turn(
        self,
        session_id: str,
        user_id: str | UUID | None,
        *,
        prompt: str | None = None,
        answer: str | None = None,
        extract: bool = True,
        inline: bool | None = None,
        end_of_request: bool = False,
        context: ContextBuilder | None = None,
    ) -> TurnOutcome:
        """End one turn as every face does (`runtime/turn.py`): record the exchange (`prompt`, `answer`; None:
        recorded already), extract now or queue (`inline`; None: the settings' choice) when the policy says it
        is due, patch `context`'s slots and summary. Never raises for memory: see `TurnOutcome`."""
        self._check_open()
        return await finish_turn(
            self,
            session_id,
            user_id,
            prompt=prompt,
            answer=answer,
            extract=extract,
            inline=inline,
            end_of_request=end_of_request,
            context=context,
        )

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
        short = await off_the_loop(self.sessions, lambda: self.sessions.snapshot(session_id, user_id=uid, bind=True))
        if uid is None:
            return MemoryContext(session_id=session_id, short_term=short)
        return await self.context_reader.read(session_id, uid, short, query=query)

    async def context_builder(self) -> ContextBuilder:
        """The manager's context assembly (`context/builder.py`): one token budget for profile, slots, rolling
        summary, facts and history, slots and summaries kept current with the extraction. Opened on first use
        (on the manager's database, else in RAM) and closed with the manager."""
        self._check_open()
        async with self._context_lock:
            if self._context is None:
                from .context.builder import ContextBuilder

                parts = self._assembly
                url = parts.library_url() if parts is not None and parts.connector else self._database_url
                pool = parts.pool() if parts is not None else None
                self._context = await ContextBuilder.open(self, self.settings, database_url=url, wait=False, pool=pool)
                self._context.follow(self.extraction)
        return self._context

    def last_receipt(self, session_id: str, user_id: str | UUID | None = None) -> ContextReceipt | None:
        """What the last context built in this process for `session_id` and `user_id` held: facts injected and
        why, tokens per part, what was cut (`ContextReceipt`); None when none was built here."""
        return self._context.last_receipt(session_id, user_id) if self._context is not None else None

    def format_memory_for_agent(self, context: MemoryContext) -> str:
        """The compact, fenced memory block for an agent's instructions ("" when nothing is known). Pure."""
        return format_memory_for_agent(context, self._format)

    # --- long-term memory ---------------------------------------------------------------------------------
    async def update_memory(self, update: MemoryUpdate) -> list[MemorizedFact]:
        """Persist facts, preferences, a project and patterns for a user, in one round trip.

        Every fact is checked first (length, confidence threshold) and stripped of sensitive data; if any
        fact is invalid nothing is written. Repeats and near-duplicates of stored facts reinforce them; a
        fact with `replaces`, or a new value of a slot (a budget, a material), supersedes the old fact, which
        is kept as history. Returns the stored facts as they are now in the store;
        `update_memory_detailed` also says what was inserted, reinforced and superseded.
        """
        return (await self.update_memory_detailed(update)).stored

    async def update_memory_detailed(self, update: MemoryUpdate) -> WriteOutcome:
        """`update_memory`, returning a `WriteOutcome`: the stored facts and how many were inserted,
        reinforced or merged as near-duplicates, and the facts superseded. Counted in `stats` too."""
        self._check_open()
        if isinstance(update, MemoryUpdate):  # anything else: the writer says what is wrong with it
            await self._check_not_paused(update.user_id)
        return await self.writer.update(update)

    async def fact_history(
        self, user_id: str | UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemorizedFact]:
        """The user's facts as they stood at `at` ("what did the user prefer in March?"): learned by then and
        not yet superseded, retracted or expired then; newest first. Without `at`, every fact, current or not
        (`invalid_at`/`superseded_by` say which). `include_invalid=False` keeps only facts still valid now.
        Confidence is the stored one (as of the last time the fact was stated)."""
        self._check_open()
        if at is not None and at.tzinfo is None:
            raise InvalidMemoryInputError("at must be timezone-aware (e.g. datetime(2026, 3, 15, tzinfo=UTC))")
        records = await self.store.fact_history(
            parse_user_id(user_id), at=at, include_invalid=include_invalid, limit=limit
        )
        return [fact_from_record(r) for r in records]

    def prepare_fact(self, fact: MemorizedFact, user_id: str | UUID) -> MemorizedFact | None:
        """Everything `update_memory` does to one fact before writing it, for code that writes facts another
        way: length and ownership checks, the confidence threshold, the sensitive-data filter
        (`sanitize_fact`), relative dates resolved against `fact.timestamp`, expiry of temporary facts.
        Returns the fact to store, or None when it must not be stored. Raises `InvalidMemoryInputError`."""
        self._check_open()
        return self.writer.admission.admit(fact, parse_user_id(user_id))

    def sanitize_fact(self, fact: MemorizedFact) -> MemorizedFact | None:
        """The sensitive-data hook every write path calls before a fact is stored.

        Returns the fact with payment cards, IBANs, national ids, passwords and API keys replaced by
        ``[redacted <kind>]`` and clinical details reduced to a non-clinical `health_note`, or None when
        nothing storable is left (only sensitive data, or clinical detail with no practical consequence).
        Counted in `stats` and logged without the sensitive text. Pure otherwise: nothing is written.
        The rules: `memory_plugin.privacy.sanitize_fact_text`.
        """
        return self.writer.admission.sanitize_fact(fact)

    # --- extraction ------------------------------------------------------------------------------------------
    async def extract_facts_from_conversation(
        self, messages: Sequence[Message], user_id: str | UUID, *, known_facts: Sequence[MemorizedFact] = ()
    ) -> list[MemorizedFact]:
        """Extract candidate long-term facts from `messages` with the configured extractor.

        Returns facts that pass the storage policy (confidence threshold, length), owned by `user_id`;
        it does not store them (pass them to `update_memory`). Invalid items from the model are dropped
        one by one and counted in `stats.facts_rejected`. Raises `ExtractionError` when the model fails.
        `known_facts`: the user's current facts, shown to the extractor with their ids so that a new fact
        can name the one it replaces.
        """
        self._check_open()
        return (await self.extraction.extract(messages, parse_user_id(user_id), known_facts=known_facts)).facts

    async def remember_from_session(self, session_id: str, user_id: str | UUID) -> list[MemorizedFact]:
        """Extract facts from the session's messages not extracted yet and store them, now. Failures are
        reported (logged, counted) and return []; they never lose the session, and the messages stay pending
        for the next extraction."""
        self._check_open()
        uid = parse_user_id(user_id)
        if await self.consent.paused(uid):
            return []
        run = await self.extraction.run(check_session_id(session_id), uid, force=True)
        return run.stored

    async def extract_if_due(
        self, session_id: str, user_id: str | UUID, *, end_of_request: bool = False
    ) -> ExtractionRun:
        """Run one batched extraction if the extraction policy says so (`memory_plugin.extraction.policy`):
        an explicit memory instruction, the end of a request (`end_of_request=True`), or the cadence of
        `extract_every_n_messages` user messages. All messages not extracted yet go in one call; at most one
        extraction per session runs at a time. Failures are logged and counted, returned in
        `ExtractionRun.error`, and the messages stay pending."""
        self._check_open()
        uid = parse_user_id(user_id)
        if await self.consent.paused(uid):
            return ExtractionRun()
        return await self.extraction.run(check_session_id(session_id), uid, end_of_request=end_of_request)

    # --- remember and search (query-aware retrieval) -------------------------------------------------------
    async def remember(
        self,
        user_id: str | UUID,
        content: str,
        *,
        category: FactCategory = "fact",
        occurred_at: datetime | None = None,
        expires_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        importance: int = 3,
    ) -> MemoryRecord:
        """Store `content` as given, without a model call (mem0's `infer=False`), with its embedding.

        Only an exact repeat (same category, content and metadata) merges into the stored memory, reinforcing
        it; anything else is a new memory. Sensitive data is redacted first, as for extracted facts. Returns
        the stored row. Raises `InvalidMemoryInputError` for bad input, or when nothing is left once the
        sensitive-data filter has run (nothing is stored).

            fact = await memory.remember(user_id, "Prefiere aluminio 7075", category="preference",
                                         occurred_at=dt, metadata={"dia_id": "D1:3"})
        """
        note = Note(
            content=content,
            category=category,
            occurred_at=occurred_at,
            expires_at=expires_at,
            metadata=dict(metadata or {}),
            session_id=session_id,
            importance=importance,
        )
        (outcome,) = (await self.remember_many_detailed(user_id, [note])).notes
        if outcome.record is None:
            raise InvalidMemoryInputError(f"nothing is left to remember: {outcome.reason}")
        return outcome.record

    async def remember_many(self, user_id: str | UUID, notes: Sequence[Note]) -> list[MemoryRecord]:
        """`remember` for a batch: one embedding call per `embedding_batch_size` notes, one store round trip.
        Returns the stored rows, one per distinct note, in order. Invalid input (not a `Note`, over
        `max_note_chars`, a bad session id) raises before anything is written; a note the privacy policy
        refuses is skipped and the rest stored (`remember_many_detailed` reports each note)."""
        return (await self.remember_many_detailed(user_id, notes)).records

    async def remember_many_detailed(self, user_id: str | UUID, notes: Sequence[Note]) -> NoteBatchOutcome:
        """`remember_many`, reporting per note whether it was stored, merged into an existing memory, or
        refused (and why), and which kinds of data were redacted. Counted in `stats`."""
        self._check_open()
        uid = parse_user_id(user_id)
        await self._check_not_paused(uid)
        return await self.writer.remember_many(uid, notes)

    async def search(self, user_id: str | UUID, query: str, *, limit: int = 10) -> list[ScoredMemory]:
        """The user's memories that best answer `query`, best first, each with its score and the score's parts.

        One round trip: vector similarity, full-text and (optionally) trigram relevance, the neighbouring turns,
        the speaker and dates the question names, fused and adjusted by importance, confidence and recency,
        over valid, unexpired facts only (`public.memory_search`). The question is embedded once (cached);
        if the embedder fails the search runs on the text signals (counted in `stats.embedding_failures`).
        """
        self._check_open()
        return await self.searcher.search(parse_user_id(user_id), query, limit=limit)

    # --- inspection and user control ----------------------------------------------------------------------------
    async def list_memory(self, user_id: str | UUID, *, limit: int = 1000) -> list[MemoryRecord]:
        """Every stored item of the user, newest first (for `memory-plugin inspect` and exports)."""
        self._check_open()
        return await self.store.list_records(parse_user_id(user_id), limit=limit)

    async def search_text(self, user_id: str | UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """Stored items whose content contains `text` (case-insensitive)."""
        self._check_open()
        if not text.strip():
            raise InvalidMemoryInputError("search text must not be empty")
        check_text(text, "search text", MAX_ENTITY_CHARS)
        return await self.store.search_text(parse_user_id(user_id), text, limit=limit)

    async def forget(self, user_id: str | UUID, item_id: str | UUID) -> bool:
        """Delete one stored item of the user; returns whether it existed. Background jobs of the user queued
        before (not yet written) will not write it again: they leave out facts matching it."""
        self._check_open()
        uid, record_id = parse_user_id(user_id), parse_item_id(item_id)
        queue, _ = self._background()
        pending = await queue.status()
        if pending.depth or pending.dead:
            # Marked before the delete: a job writing now either sees the mark, or finishes first and its
            # write is deleted with the rest (the queue holds the job's row while it writes).
            forgotten = [r.content for r in await self.store.list_records(uid, limit=100_000) if r.id == record_id]
            if forgotten:
                await queue.forget(uid, forgotten)
        return await self.store.delete(uid, record_id)

    def export_user(self, user_id: str | UUID) -> AsyncIterator[str]:
        """Everything stored about the user, as the text chunks of one versioned JSON document (docs/export.md):
        `async for chunk in memory.export_user(user_id): out.write(chunk)`. Read as the user under row-level
        security, in pages of one consistent snapshot, so memory stays bounded whatever the user holds."""
        self._check_open()
        uid = parse_user_id(user_id)
        url = self._postgres_url("an export")
        return export_from_url(url, uid, as_user=True, connect_timeout=self.settings.connect_timeout_seconds)

    async def import_user(self, document: str | bytes | Mapping[str, Any]) -> ImportReport:
        """Restore an export into this database, which must hold nothing of that user (`ImportConflictError`
        otherwise; `ExportFormatError` for a file that is not a readable export): all of it, or nothing. Runs on
        the service path (`admin_database_url`, else the manager's own URL), then gives the restored facts
        vectors of this manager's embedding model (vectors are not part of an export)."""
        self._check_open()
        admin = self.settings.admin_database_url
        url = admin.get_secret_value() if admin is not None else self._postgres_url("an import")
        report = await import_into_url(url, document, connect_timeout=self.settings.connect_timeout_seconds)
        if self.embedder is not None and report.rows.get("memories"):
            await reembed_user(self.store, self.embedder, report.user_id)
        return report

    def _postgres_url(self, what: str) -> str:
        if self.database_url is None:
            raise MemoryPluginError(f"{what} needs the Postgres backend (a manager opened without store=)")
        return self.database_url

    async def pause_memory(self, user_id: str | UUID, paused: bool = True) -> None:
        """Pause (or, with `paused=False`, resume) the user's memory: while paused nothing new is stored about
        them — `update_memory` and `remember` raise `MemoryPausedError`, extraction (inline, queued, or already
        queued) stores nothing — and reads work as before. Kept in the database: every process sees it."""
        self._check_open()
        await self.consent.set_paused(parse_user_id(user_id), paused)

    async def memory_paused(self, user_id: str | UUID) -> bool:
        """Whether the user's memory is paused (`pause_memory`)."""
        self._check_open()
        return await self.consent.paused(parse_user_id(user_id))

    async def _check_not_paused(self, user_id: UUID) -> None:
        if await self.consent.paused(user_id):
            raise MemoryPausedError(f"user {user_id} paused their memory: nothing is stored until they resume it")

    async def backend_status(self) -> BackendStatus:
        """Which backend serves long-term memory, whether the database answers (pinged now), the journal's
        length, the last connection error and the fallback/replay counters."""
        self._check_open()
        status = await self.store.status(require_primary=self.settings.require_pg_memory)
        try:
            queue: QueueStatus | None = await self.queue_status()
        except MemoryPluginError as exc:
            logger.warning("%s could not read the memory job queue: %s", LOG_PREFIX, exc)
            queue = None
        return dataclasses.replace(status, queue=queue)

    def describe(self) -> dict[str, Any]:
        """Backend, extractor and counters, for logs and status pages (the database URL without its password)."""
        stats = self.stats
        return {
            "backend": self.store.backend_name,
            "database_url": masked_url(self.database_url) if self.database_url else None,
            "extractor": self.extractor.name,
            "live_sessions": len(self.sessions) if isinstance(self.sessions, Sized) else None,
            "stats": {name: getattr(stats, name) for name in MemoryStats.__slots__},
        }


class _Messages:
    """The manager's own counter, in the shape `MemoryStats.collect` reads."""

    __slots__ = ("exchanges_not_recorded", "messages_added")

    def __init__(self, messages_added: int, exchanges_not_recorded: int) -> None:
        self.messages_added = messages_added
        self.exchanges_not_recorded = exchanges_not_recorded
