"""`MemoryManager`: the one object an application talks to.

It composes the short-term `SessionStore` (RAM), a `LongTermStore` (Postgres by default), a
`FactExtractor` and the prompt formatting, and owns their lifecycle:

    async with MemoryManager.open(settings) as memory:
        ctx = await memory.get_memory_context(session_id, user_id)
        prompt_block = memory.format_memory_for_agent(ctx)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import ValidationError

from .conversions import fact_from_record, long_term_from_records
from .database.connector import DatabaseConnector
from .dates import resolve_relative_dates
from .embeddings import MemoryEmbedder, default_embedder
from .errors import (
    EmbeddingError,
    ExtractionError,
    InvalidMemoryInputError,
    MemoryPluginError,
    StoreError,
    StoreUnavailableError,
)
from .extraction import FactExtractor, default_extractor
from .extraction.policy import ExtractionCursors, ExtractionPolicy, ExtractionRun, ExtractionTrigger, is_small_talk
from .formatting import MemoryFormat, format_memory_for_agent
from .logs import LOG_PREFIX, logger
from .models import (
    FactCategory,
    MemorizedFact,
    MemoryContext,
    MemoryUpdate,
    Message,
    ProjectRecord,
    ShortTermMemory,
    UserPreferences,
)
from .outage.journal import WriteJournal
from .outage.resilient import BackendStatus, ContextRead, ResilientStore, plain_status
from .privacy import sanitize_fact_text, sanitize_item_text
from .quality import DecayPolicy, WriteOutcome, fold_near_duplicates, fold_semantic_duplicates
from .quality.slots import keep_latest_per_slot
from .ranking import RankingWeights
from .remember import Note, note_item
from .retrieval import ScoredMemory, SearchQuery, SearchWeights, analyze_query
from .rows import MemoryItem, MemoryRecord
from .session import Clock, SessionStore
from .settings import MemorySettings
from .store import ContextQuery, LongTermStore
from .write.items import items_from_update

__all__ = ["MemoryManager", "MemoryStats"]


_MAX_SESSION_ID_CHARS = 256
TEMPORARY_FACT_IMPORTANCE = 4
"""Lowest importance of a fact stored with an expiry (see `_admit_fact`)."""
_MAX_ENTITY_CHARS = 200


@dataclass(slots=True)
class MemoryStats:
    """Counters since the manager opened: what a status page or a test can read."""

    messages_added: int = 0
    """Messages recorded in short-term memory."""
    facts_written: int = 0
    """Fact rows inserted or reinforced."""
    facts_rejected: int = 0
    """Candidate facts dropped: invalid extractor items, below the confidence threshold, too long."""
    facts_redacted: int = 0
    """Facts stored with sensitive data removed."""
    facts_dropped_sensitive: int = 0
    """Facts not stored because nothing was left once sensitive data was removed."""
    extraction_calls: int = 0
    """Extractions run."""
    extraction_model_calls: int = 0
    """Model requests made by extractions."""
    extraction_failures: int = 0
    """Extractions that failed (model error, unusable output)."""
    store_failures: int = 0
    """Long-term reads that failed: answered with the cached copy (`ResilientStore`) or short-term memory only."""
    facts_embedded: int = 0
    """Facts written with their embedding."""
    embedding_failures: int = 0
    """Embedder failures: facts stored without a vector (`memory-plugin reembed` fills them), or searches run on
    text signals only."""
    searches: int = 0
    """Searches run (`search`, and `get_memory_context` with a query)."""
    facts_health_reduced: int = 0
    """Facts whose clinical details were replaced by a non-clinical `health_note`."""
    facts_dropped_health: int = 0
    """Facts not stored because they held clinical details and nothing else useful."""
    items_redacted: int = 0
    """Preferences, projects and patterns stored with sensitive data removed."""
    dates_resolved: int = 0
    """Facts whose relative dates ("next Friday") were rewritten as absolute dates."""
    facts_expiring: int = 0
    """Facts stored with an expiry (temporary facts)."""
    extraction_rejections: dict[str, int] = field(default_factory=dict)
    """Extractor items rejected, by reason ("unknown_category", "bad_confidence", "empty", "too_long"...);
    their total is part of `facts_rejected`."""
    extraction_fields_dropped: int = 0
    """Optional fields removed from extracted facts: a `replaces` id that was not a candidate, a bad
    `expires_at`."""
    extractions_explicit: int = 0
    """Extractions triggered by a memory instruction ("recuerda…", "don't suggest…")."""
    extractions_end_of_request: int = 0
    """Extractions triggered by the end of a request."""
    extractions_cadence: int = 0
    """Extractions triggered by the every-N-user-messages cadence."""
    extractions_skipped: int = 0
    """Triggers whose pending messages were only small talk: no model call."""
    facts_inserted: int = 0
    """Fact rows inserted (new facts)."""
    facts_reinforced: int = 0
    """Stored facts stated again (exact repeats and near-duplicates) instead of inserted."""
    facts_near_duplicates: int = 0
    """Facts merged into a similar fact (stored, or earlier in the same write) instead of inserted."""
    facts_superseded: int = 0
    """Stored facts a write made no longer current (`replaces`, a new value of their slot); kept as history."""


def _parse_user_id(user_id: str | UUID) -> UUID:
    if isinstance(user_id, UUID):
        return user_id
    try:
        return UUID(str(user_id))
    except ValueError:
        raise InvalidMemoryInputError(
            f"user_id must be a UUID (as Supabase Auth user ids are), got {user_id!r}"
        ) from None


def _check_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not session_id.strip():
        raise InvalidMemoryInputError("session_id must be a non-empty string")
    if "\x00" in session_id or len(session_id) > _MAX_SESSION_ID_CHARS:
        raise InvalidMemoryInputError(f"session_id must have no NUL and at most {_MAX_SESSION_ID_CHARS} characters")
    return session_id


def _check_text(value: str, what: str, limit: int) -> str:
    if "\x00" in value:
        raise InvalidMemoryInputError(f"{what} must not contain NUL (\\x00) characters")
    if len(value) > limit:
        raise InvalidMemoryInputError(f"{what} is {len(value):,} characters; the limit is {limit:,}")
    return value


class MemoryManager:
    """Short-term sessions and long-term user memory for agents.

    Build with `MemoryManager.open(settings)` (an async context manager) or `await MemoryManager.create(...)`
    plus `await memory.close()`. Every method that touches memory is awaited; `format_memory_for_agent` is
    pure.
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
    ) -> None:
        self.settings = settings
        self.store = store
        self.extractor = extractor or default_extractor(settings.extraction_model)
        self.embedder = embedder if embedder is not None else default_embedder(settings)
        """Embeds facts at write time and questions at search time (None: text-only search)."""
        self._search_weights = SearchWeights.from_settings(settings)
        self.sessions = SessionStore(
            max_messages=settings.max_messages_per_session,
            ttl_seconds=settings.session_ttl_seconds,
            max_sessions=settings.max_sessions,
            clock=clock or time.monotonic,
        )
        self.stats = MemoryStats()
        self._database_url = database_url
        self._weights = RankingWeights.from_settings(settings)
        self._decay = DecayPolicy(half_life_days=dict(settings.half_life_days), floor=settings.decay_floor)
        self._format = MemoryFormat(
            recent_messages=settings.recent_messages_in_prompt, message_chars=settings.message_chars_in_prompt
        )
        self.policy = ExtractionPolicy.from_settings(settings)
        self._date_zone = ZoneInfo(settings.date_timezone) if settings.date_timezone else None
        self._cursors = ExtractionCursors(settings.max_sessions)
        self._sweeper: asyncio.Task[None] | None = None
        self._last_store_warning: float | None = None
        self._connector: DatabaseConnector | None = None

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
        connector: DatabaseConnector | None = None
        if store is None:
            connector = DatabaseConnector(settings)
            if settings.resilient_store:
                store = ResilientStore(
                    None,
                    WriteJournal.for_database(settings.data_dir, connector.identity),
                    connect=connector,
                    primary_name="postgres",
                    require_primary=settings.require_pg_memory,
                    cache_size=settings.fallback_cache_users,
                    retry_base_seconds=settings.retry_base_seconds,
                    retry_max_seconds=settings.retry_max_seconds,
                    log_interval_seconds=settings.outage_log_interval_seconds,
                    close_flush_seconds=settings.connect_timeout_seconds,
                )
            else:
                store = await connector()
        if isinstance(store, ResilientStore):
            try:
                await store.start()  # connects (or falls back), replays what an earlier run journaled
            except BaseException:
                await store.close()
                raise
        manager = cls(settings, store, extractor=extractor, clock=clock, embedder=embedder)
        manager._connector = connector
        manager._start_sweeper()
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
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self.store.close()

    def _start_sweeper(self) -> None:
        async def sweep() -> None:
            while True:
                await asyncio.sleep(self.settings.session_sweep_interval_seconds)
                expired = self.sessions.expire()
                if expired:
                    logger.debug("%s released %d expired sessions", LOG_PREFIX, expired)

        self._sweeper = asyncio.get_running_loop().create_task(sweep(), name="memory_plugin-session-sweeper")

    @property
    def database_url(self) -> str | None:
        """The Postgres in use (open it with `psql`), or None for a non-Postgres store (and, for the
        embedded default, until its server has started)."""
        if self._connector is not None:
            return self._connector.url
        return self._database_url

    # --- short-term memory ---------------------------------------------------------------------------------
    async def add_message(self, session_id: str, message: Message) -> int:
        """Record a message in the session's short-term memory (the last N are kept).

        Returns the number of messages the session has seen, which `should_extract` uses.
        """
        _check_session_id(session_id)
        if not isinstance(message, Message):
            raise InvalidMemoryInputError(f"message must be a Message, got {type(message).__name__}")
        _check_text(message.content, "message content", self.settings.max_message_chars)
        self.stats.messages_added += 1
        return self.sessions.add_message(session_id, message)

    async def update_session_entities(self, session_id: str, entities: Mapping[str, str | Iterable[str]]) -> None:
        """Merge extracted entities into the session, without duplicates (case- and accent-insensitive)."""
        _check_session_id(session_id)
        clean: dict[str, list[str]] = {}
        for kind, values in entities.items():
            if not isinstance(kind, str):
                raise InvalidMemoryInputError(f"entity kinds must be strings, got {kind!r}")
            items = [values] if isinstance(values, str) else list(values)
            for value in items:
                if not isinstance(value, str):
                    raise InvalidMemoryInputError(f"entity values must be strings, got {value!r} for {kind!r}")
                _check_text(value, f"entity {kind!r}", _MAX_ENTITY_CHARS)
            clean[_check_text(kind, "entity kind", _MAX_ENTITY_CHARS)] = items
        self.sessions.update_entities(session_id, clean)

    async def update_session_intents(self, session_id: str, intent: str) -> None:
        """Record an intent detected in the session."""
        _check_session_id(session_id)
        if not isinstance(intent, str) or not intent.strip():
            raise InvalidMemoryInputError("intent must be a non-empty string")
        self.sessions.add_intent(session_id, _check_text(intent, "intent", _MAX_ENTITY_CHARS))

    async def get_short_term(self, session_id: str) -> ShortTermMemory:
        """The session's messages, entities and intents (empty when unknown or expired)."""
        return self.sessions.snapshot(_check_session_id(session_id))

    def should_extract(self, messages_seen: int) -> bool:
        """The seed's plain count: True after every `extract_every_n_messages` messages of a session.

        Kept for callers that count messages themselves; the capability and the workflow use the extraction
        policy instead (`extract_if_due`), which batches, follows explicit triggers and skips small talk."""
        return messages_seen > 0 and messages_seen % self.settings.extract_every_n_messages == 0

    # --- context -----------------------------------------------------------------------------------------------
    async def get_memory_context(
        self, session_id: str, user_id: str | UUID | None = None, *, query: str | None = None
    ) -> MemoryContext:
        """The session's short-term state plus the user's most relevant long-term memory.

        If the long-term store cannot be read, `long_term_available` is False and the context holds
        short-term memory plus, with `ResilientStore`, the last copy of the user's long-term memory read
        before (`long_term_cached_at` says when); the formatted block says so. The failure is logged
        (throttled) and counted, not raised, unless `require_pg_memory`.
        With `query` (the current message) the facts are the ones `search` ranks best for it (relevance, then
        importance, confidence and recency), searched concurrently with the rest of the context; without, the
        user's most important, confident and recent facts. Rejections ("don't suggest X") are kept either way.
        If the search fails, the facts ranked without the query are used.
        """
        _check_session_id(session_id)
        uid = _parse_user_id(user_id) if user_id is not None else None
        short = self.sessions.snapshot(session_id)
        if uid is None:
            return MemoryContext(session_id=session_id, short_term=short)
        found: asyncio.Task[list[ScoredMemory]] | None = None
        if query is not None and query.strip() and self.settings.max_facts_in_context > 0:
            found = asyncio.get_running_loop().create_task(
                self.search(uid, query[: self.settings.max_search_chars], limit=self.settings.max_facts_in_context)
            )
        try:
            # With a query the search chooses the facts, so the read skips ranking them (at 100k facts that
            # ranking cost 3.9 ms of database time per call, for facts that were then dropped).
            context = await self._read_context(session_id, uid, short, rank_facts=found is None)
        except BaseException:
            if found is not None:
                found.cancel()
                with contextlib.suppress(BaseException):
                    await found
            raise
        if found is None:
            return context
        try:
            hits = await found
        except (StoreError, InvalidMemoryInputError) as exc:
            self._report_store_failure("searching the context's facts", exc)
            # The facts ranked without the query (read now: the first read skipped them).
            return await self._read_context(session_id, uid, short)
        chosen = [fact_from_record(h.memory) for h in hits]
        ids = {f.id for f in chosen}
        # Rejections ("don't suggest X") reach the prompt whatever the message (seed 002); the read returns
        # them whether or not it ranks facts.
        kept = [f for f in context.long_term.facts if f.category == "rejection" and f.id not in ids]
        context.long_term.facts = chosen + kept
        if context.long_term_available and isinstance(self.store, ResilientStore):
            # The outage copy keeps the facts this context showed (the read did not fetch ranked ones).
            self.store.cache_shown_facts(uid, [h.memory for h in hits])
        return context

    async def _read_context(
        self, session_id: str, uid: UUID, short: ShortTermMemory, *, rank_facts: bool = True
    ) -> MemoryContext:
        """The context without a query: `get_memory_context`'s read of the store (without the ranked facts
        when not `rank_facts`; rejections, preferences, projects and patterns either way)."""
        query = self._context_query()
        if not rank_facts:
            query = dataclasses.replace(query, max_facts=0)
        try:
            if isinstance(self.store, ResilientStore):
                read = await self.store.read_context(uid, query)
            else:
                read = ContextRead(await self.store.context(uid, query), "primary", None)
        except StoreError as exc:
            if self.settings.require_pg_memory and isinstance(exc, StoreUnavailableError):
                raise
            self._report_store_failure("reading the context", exc)
            return MemoryContext(session_id=session_id, user_id=uid, short_term=short, long_term_available=False)
        # Confidence shown is the decayed one, as ranked (quality/decay.py).
        long = long_term_from_records(read.records, now=datetime.now(UTC), decay=self._decay)
        if read.source != "primary":
            self.stats.store_failures += 1  # ResilientStore logged it (throttled)
            return MemoryContext(
                session_id=session_id,
                user_id=uid,
                short_term=short,
                long_term=long,
                long_term_available=False,
                long_term_cached_at=read.as_of if read.source == "cache" else None,
            )
        logger.debug(
            "%s context for %s: %d messages, %d facts", LOG_PREFIX, session_id, len(short.messages), len(long.facts)
        )
        return MemoryContext(session_id=session_id, user_id=uid, short_term=short, long_term=long)

    def _context_query(self) -> ContextQuery:
        s = self.settings
        return ContextQuery(
            max_facts=s.max_facts_in_context,
            max_projects=s.max_projects_in_context,
            max_patterns=s.max_patterns_in_context,
            weights=self._weights,
            decay=self._decay,
            max_rejections=s.max_rejections_in_context,
        )

    def _report_store_failure(self, doing: str, exc: Exception) -> None:
        self.stats.store_failures += 1
        # One warning per interval at most: a database outage must not flood the logs once per call.
        now = time.monotonic()
        last = self._last_store_warning
        if last is None or now - last >= self.settings.outage_log_interval_seconds:
            self._last_store_warning = now
            logger.warning("%s long-term store failed while %s: %s", LOG_PREFIX, doing, exc)

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
        if not isinstance(update, MemoryUpdate):
            raise InvalidMemoryInputError(f"update must be a MemoryUpdate, got {type(update).__name__}")
        if update.session_id is not None:
            _check_session_id(update.session_id)
        facts = [self._admit_fact(f, update.user_id) for f in update.new_facts]
        kept = [f for f in facts if f is not None]
        preferences, project, patterns = self._sanitize_parts(update)
        items = items_from_update(kept, preferences, project, patterns, update.session_id, self.settings.vocabulary)
        # Within this write: the last value of a slot wins, and near-duplicates fold into the first wording.
        items, _ = keep_latest_per_slot(items)
        items, folded = fold_near_duplicates(items, self.settings.near_duplicate_threshold)
        if not items:
            return WriteOutcome()
        items = await self._embed_items(items)
        # Then paraphrases by meaning (same category, guard and model), once the facts have their vectors.
        items, folded_by_meaning = fold_semantic_duplicates(items, self.settings.dedup_embedding_threshold)
        folded += folded_by_meaning
        records = await self.store.upsert(
            update.user_id,
            items,
            reinforcement_step=self.settings.reinforcement_step,
            near_duplicate_threshold=self.settings.near_duplicate_threshold,
            embedding_threshold=self.settings.dedup_embedding_threshold,
        )
        outcome = _outcome(items, records, folded)
        self.stats.facts_written += len(outcome.stored)
        self.stats.facts_inserted += outcome.inserted
        self.stats.facts_reinforced += outcome.reinforced
        self.stats.facts_near_duplicates += outcome.near_duplicates
        self.stats.facts_superseded += len(outcome.superseded)
        if outcome.stored:
            logger.info(
                "%s stored %d facts for user %s (%d new, %d reinforced, %d near-duplicates, %d superseded)",
                LOG_PREFIX,
                len(outcome.stored),
                update.user_id,
                outcome.inserted,
                outcome.reinforced,
                outcome.near_duplicates,
                len(outcome.superseded),
            )
        return outcome

    async def fact_history(
        self, user_id: str | UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemorizedFact]:
        """The user's facts as they stood at `at` ("what did the user prefer in March?"): learned by then and
        not yet superseded, retracted or expired then; newest first. Without `at`, every fact, current or not
        (`invalid_at`/`superseded_by` say which). `include_invalid=False` keeps only facts still valid now.
        Confidence is the stored one (as of the last time the fact was stated)."""
        if at is not None and at.tzinfo is None:
            raise InvalidMemoryInputError("at must be timezone-aware (e.g. datetime(2026, 3, 15, tzinfo=UTC))")
        records = await self.store.fact_history(
            _parse_user_id(user_id), at=at, include_invalid=include_invalid, limit=limit
        )
        return [fact_from_record(r) for r in records]

    def _admit_fact(self, fact: MemorizedFact, user_id: UUID) -> MemorizedFact | None:
        """Validate and clean one fact for storage; None when it must not be stored (below threshold, or
        nothing storable left once sensitive data is removed). Raises on invalid input.

        Relative dates are resolved against `fact.timestamp` (the message's time for extracted facts), and a
        fact pinned only to dates still to come gets an expiry (see `memory_plugin.dates`)."""
        if not isinstance(fact, MemorizedFact):
            raise InvalidMemoryInputError(f"new_facts must hold MemorizedFact objects, got {type(fact).__name__}")
        _check_text(fact.content, "fact content", self.settings.max_fact_chars)
        if fact.user_id is not None and fact.user_id != user_id:
            raise InvalidMemoryInputError(f"fact {fact.id} belongs to user {fact.user_id}, not {user_id}")
        if fact.confidence < self.settings.min_fact_confidence:
            self.stats.facts_rejected += 1
            logger.debug("%s not storing low-confidence fact (%.2f): %s", LOG_PREFIX, fact.confidence, fact.content)
            return None
        clean = self.sanitize_fact(fact)
        if clean is None:
            return None
        said_at = clean.timestamp
        if self._date_zone is not None and said_at.tzinfo is not None:
            said_at = said_at.astimezone(self._date_zone)  # the users' calendar decides what "mañana" is
        dates = resolve_relative_dates(clean.content, said_at)
        changes: dict[str, Any] = {"user_id": user_id}
        if dates.changed:
            self.stats.dates_resolved += 1
            changes["content"] = dates.text
        expires_at = clean.expires_at or dates.expires_at(said_at)
        if expires_at is not None:
            self.stats.facts_expiring += 1
            changes["expires_at"] = expires_at
            # While it holds, a temporary fact is what matters most ("away next week", "parts needed by
            # Friday"); with its category's low default it would never make the prompt's top facts.
            changes["importance"] = max(clean.importance, TEMPORARY_FACT_IMPORTANCE)
        return clean.model_copy(update=changes)

    def prepare_fact(self, fact: MemorizedFact, user_id: str | UUID) -> MemorizedFact | None:
        """Everything `update_memory` does to one fact before writing it, for code that writes facts another
        way: length and ownership checks, the confidence threshold, the sensitive-data filter
        (`sanitize_fact`), relative dates resolved against `fact.timestamp`, expiry of temporary facts.
        Returns the fact to store, or None when it must not be stored. Raises `InvalidMemoryInputError`."""
        return self._admit_fact(fact, _parse_user_id(user_id))

    def sanitize_fact(self, fact: MemorizedFact) -> MemorizedFact | None:
        """The sensitive-data hook every write path calls before a fact is stored.

        Returns the fact with payment cards, IBANs, national ids, passwords and API keys replaced by
        ``[redacted <kind>]`` and clinical details reduced to a non-clinical `health_note`, or None when
        nothing storable is left (only sensitive data, or clinical detail with no practical consequence).
        Counted in `stats` and logged without the sensitive text. Pure otherwise: nothing is written.
        The rules: `memory_plugin.privacy.sanitize_fact_text`.
        """
        result = sanitize_fact_text(fact.content, fact.category)
        if result.text is None:
            if result.dropped == "clinical":
                self.stats.facts_dropped_health += 1
                logger.info("%s dropped a fact made of clinical details (%s)", LOG_PREFIX, ", ".join(result.clinical))
            else:
                self.stats.facts_dropped_sensitive += 1
                logger.info(
                    "%s dropped a fact made only of sensitive data (%s)", LOG_PREFIX, ", ".join(result.redacted)
                )
            return None
        if result.redacted:
            self.stats.facts_redacted += 1
            logger.info("%s redacted %s from a fact before storing it", LOG_PREFIX, ", ".join(result.redacted))
        if result.health_reduced:
            self.stats.facts_health_reduced += 1
            logger.info("%s reduced clinical details (%s) to a health note", LOG_PREFIX, ", ".join(result.clinical))
        if result.text == fact.content and result.category == fact.category:
            return fact
        return fact.model_copy(update={"content": result.text, "category": result.category})

    def _sanitize_parts(self, update: MemoryUpdate) -> tuple[UserPreferences | None, ProjectRecord | None, list[str]]:
        """The update's preferences, project and patterns with sensitive data redacted."""
        found = False

        def clean(text: str) -> str:
            nonlocal found
            cleaned, kinds = sanitize_item_text(text)
            found = found or bool(kinds)
            return cleaned

        prefs = update.preferences
        if prefs is not None:
            prefs = prefs.model_copy(
                update={
                    "preferred_materials": [clean(m) for m in prefs.preferred_materials],
                    **{
                        slot: clean(value)
                        for slot in ("typical_quantities", "industry", "location")
                        if (value := getattr(prefs, slot)) is not None
                    },
                }
            )
        project = update.project
        if project is not None:
            project = project.model_copy(
                update={
                    "description": clean(project.description),
                    "materials": tuple(clean(m) for m in project.materials),
                    "quantity": clean(project.quantity) if project.quantity is not None else None,
                    "status": clean(project.status),
                }
            )
        patterns = [clean(p) for p in update.patterns]
        if found:
            self.stats.items_redacted += 1
            logger.info("%s redacted sensitive data from preferences, a project or patterns", LOG_PREFIX)
        return prefs, project, patterns

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
        uid = _parse_user_id(user_id)
        if not messages:
            return []
        self.stats.extraction_calls += 1
        try:
            outcome = await self.extractor.extract(list(messages), known_facts=list(known_facts))
        except ExtractionError:
            self.stats.extraction_failures += 1
            raise
        self.stats.extraction_model_calls += outcome.model_calls
        self.stats.facts_rejected += outcome.rejected
        self.stats.extraction_fields_dropped += sum(outcome.dropped_fields.values())
        for reason, count in outcome.rejections.items():
            self.stats.extraction_rejections[reason] = self.stats.extraction_rejections.get(reason, 0) + count
        if outcome.rejections or outcome.dropped_fields:
            logger.info(
                "%s extraction output: rejected %s, fields dropped %s",
                LOG_PREFIX,
                outcome.rejections or "{}",
                outcome.dropped_fields or "{}",
            )
        accepted: list[MemorizedFact] = []
        for fact in outcome.facts:
            too_long = len(fact.content) > self.settings.max_fact_chars
            if too_long or fact.confidence < self.settings.min_fact_confidence:
                self.stats.facts_rejected += 1
                continue
            accepted.append(fact.model_copy(update={"user_id": uid}))
        logger.info(
            "%s extracted %d facts (%d rejected) with %s",
            LOG_PREFIX,
            len(accepted),
            outcome.rejected + len(outcome.facts) - len(accepted),
            self.extractor.name,
        )
        return accepted

    async def remember_from_session(self, session_id: str, user_id: str | UUID) -> list[MemorizedFact]:
        """Extract facts from the session's messages not extracted yet and store them, now (the seed's
        step 7 on demand). Failures are reported (logged, counted) and return []; they never lose the
        session, and the messages stay pending for the next extraction."""
        run = await self._extract(session_id, user_id, force=True)
        return run.stored

    async def extract_if_due(
        self, session_id: str, user_id: str | UUID, *, end_of_request: bool = False
    ) -> ExtractionRun:
        """Run one batched extraction if the extraction policy says so (`memory_plugin.extraction.policy`):
        an explicit memory instruction, the end of a request (`end_of_request=True`), or the cadence of
        `extract_every_n_messages` user messages. All messages not extracted yet go in one call; at most one
        extraction per session runs at a time. Failures are logged and counted, returned in
        `ExtractionRun.error`, and the messages stay pending."""
        return await self._extract(session_id, user_id, end_of_request=end_of_request)

    async def _extract(
        self, session_id: str, user_id: str | UUID, *, end_of_request: bool = False, force: bool = False
    ) -> ExtractionRun:
        uid = _parse_user_id(user_id)
        _check_session_id(session_id)
        async with self._cursors.flight(session_id):
            # Decided under the lock: a trigger that waited for the previous extraction sees the cursor it
            # moved, so messages are never extracted twice and a burst of triggers makes one call.
            short = self.sessions.snapshot(session_id)
            pending = self._cursors.pending(session_id, short.messages)
            trigger: ExtractionTrigger | None = (
                "manual" if force and pending else self.policy.decide(pending, end_of_request=end_of_request)
            )
            if trigger is None:
                return self._maybe_skip(session_id, pending, end_of_request)
            run = ExtractionRun(trigger=trigger, messages=len(pending))
            self._count_trigger(trigger)
            try:
                known = await self._candidate_facts(uid)
                facts = await self.extract_facts_from_conversation(pending, uid, known_facts=known)
                if facts:
                    run.stored = await self.update_memory(
                        MemoryUpdate(user_id=uid, session_id=session_id, new_facts=facts)
                    )
            except MemoryPluginError as exc:
                run.error = str(exc)
                logger.warning("%s extraction (%s) failed for session %s: %s", LOG_PREFIX, trigger, session_id, exc)
            else:
                self._cursors.advance(session_id, pending)
            return run

    def _maybe_skip(self, session_id: str, pending: Sequence[Message], end_of_request: bool) -> ExtractionRun:
        """Nothing due. If a trigger would have fired but the pending user messages are only small talk,
        move the cursor past them so they are not carried along forever."""
        users = [m for m in pending if m.role == "user"]
        small_talk_only = bool(users) and all(is_small_talk(m.content) for m in users)
        if small_talk_only and (end_of_request or len(users) >= self.policy.every_n_user_messages):
            self._cursors.advance(session_id, pending)
            self.stats.extractions_skipped += 1
            return ExtractionRun(skipped=True, messages=len(pending))
        return ExtractionRun()

    def _count_trigger(self, trigger: ExtractionTrigger) -> None:
        if trigger == "explicit":
            self.stats.extractions_explicit += 1
        elif trigger == "end_of_request":
            self.stats.extractions_end_of_request += 1
        elif trigger == "cadence":
            self.stats.extractions_cadence += 1

    async def _candidate_facts(self, user_id: UUID) -> list[MemorizedFact]:
        """The user's best-ranked current facts (`extraction_candidate_facts` of them), given to the extractor
        with their ids for `replaces`; [] when the store cannot be read now (extraction goes on without)."""
        if self.settings.extraction_candidate_facts == 0:
            return []
        query = ContextQuery(
            max_facts=self.settings.extraction_candidate_facts, max_projects=0, max_patterns=0, weights=self._weights
        )
        # Through the primary, not ResilientStore.read_context: that would replace the user's cached context
        # (the outage copy of what the agent sees) with this wider, facts-only read.
        store = self.store.primary if isinstance(self.store, ResilientStore) else self.store
        if store is None:
            return []
        try:
            records = await store.context(user_id, query)
        except StoreError as exc:
            if self.settings.require_pg_memory and isinstance(exc, StoreUnavailableError):
                raise
            self._report_store_failure("reading candidate facts for extraction", exc)
            return []
        return [fact_from_record(r) for r in records if r.kind == "fact"]

    # --- remember and search (query-aware retrieval) -------------------------------------------------------
    async def _embed_items(self, items: list[MemoryItem]) -> list[MemoryItem]:
        """The facts among `items` with their embeddings, computed in batches (one model call per
        `embedding_batch_size` facts). If the embedder fails the facts are stored without vectors: counted,
        logged, found by text until `memory-plugin reembed` fills them."""
        embedder = self.embedder
        todo = [i for i, item in enumerate(items) if item.kind == "fact" and item.embedding is None]
        if embedder is None or not todo:
            return items
        try:
            vectors = await embedder.embed_documents([items[i].content for i in todo])
        except EmbeddingError as exc:
            self.stats.embedding_failures += len(todo)
            logger.warning("%s storing %d facts without embeddings: %s", LOG_PREFIX, len(todo), exc)
            return items
        out = list(items)
        for i, vector in zip(todo, vectors, strict=True):
            out[i] = dataclasses.replace(items[i], embedding=vector, embedding_model=embedder.name)
        self.stats.facts_embedded += len(todo)
        return out

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
        note = _make_note(
            content=content,
            category=category,
            occurred_at=occurred_at,
            expires_at=expires_at,
            metadata=dict(metadata or {}),
            session_id=session_id,
            importance=importance,
        )
        (record,) = await self.remember_many(user_id, [note])
        return record

    async def remember_many(self, user_id: str | UUID, notes: Sequence[Note]) -> list[MemoryRecord]:
        """`remember` for a batch: one embedding call per `embedding_batch_size` notes, one store round trip.
        Returns the stored rows, one per distinct note, in order. All or nothing on bad input."""
        uid = _parse_user_id(user_id)
        items: list[MemoryItem] = []
        for note in notes:
            if not isinstance(note, Note):
                raise InvalidMemoryInputError(f"remember_many takes Note objects, got {type(note).__name__}")
            _check_text(note.content, "memory content", self.settings.max_fact_chars)
            if note.session_id is not None:
                _check_session_id(note.session_id)
            # The sensitive-data hook of every write path (payment data, ids, secrets, clinical details).
            as_fact = MemorizedFact(
                content=note.content, category=note.category, confidence=note.confidence, source=note.source
            )
            clean = self.sanitize_fact(as_fact)
            if clean is None:
                raise InvalidMemoryInputError("nothing is left to remember once sensitive data is removed")
            if clean is not as_fact:
                note = note.model_copy(update={"content": clean.content, "category": clean.category})
            items.append(note_item(note))
        if not items:
            return []
        # Exact repeats inside the batch are one row (Postgres cannot upsert one row twice in a statement).
        unique = list({item.content_hash: item for item in items}.values())
        unique = await self._embed_items(unique)
        records = await self.store.upsert(uid, unique, reinforcement_step=self.settings.reinforcement_step)
        self.stats.facts_written += len(records)
        return records

    async def search(self, user_id: str | UUID, query: str, *, limit: int = 10) -> list[ScoredMemory]:
        """The user's memories that best answer `query`, best first, each with its score and the score's parts.

        One round trip: vector similarity, full-text and (optionally) trigram relevance, the neighbouring turns,
        the speaker and dates the question names, fused and adjusted by importance, confidence and recency,
        over valid, unexpired facts only (`public.memory_search`). The question is embedded once (cached);
        if the embedder fails the search runs on the text signals (counted in `stats.embedding_failures`).
        """
        uid = _parse_user_id(user_id)
        if not isinstance(query, str) or not query.strip():
            raise InvalidMemoryInputError("search query must be a non-empty string")
        _check_text(query, "search query", self.settings.max_search_chars)
        if not 1 <= limit <= 1000:
            raise InvalidMemoryInputError(f"limit must be between 1 and 1000, got {limit}")
        embedding: tuple[float, ...] | None = None
        if self.embedder is not None:
            try:
                embedding = await self.embedder.embed_query(query)
            except EmbeddingError as exc:
                self.stats.embedding_failures += 1
                logger.warning("%s searching by text only: %s", LOG_PREFIX, exc)
        self.stats.searches += 1
        return await self.store.search(
            uid,
            SearchQuery(
                text=query,
                limit=limit,
                embedding=embedding,
                model=self.embedder.name if self.embedder is not None and embedding is not None else None,
                weights=self._search_weights,
                analysis=analyze_query(query),
            ),
        )

    # --- inspection and user control ----------------------------------------------------------------------------
    async def list_memory(self, user_id: str | UUID, *, limit: int = 1000) -> list[MemoryRecord]:
        """Every stored item of the user, newest first (for `memory-plugin inspect` and exports)."""
        return await self.store.list_records(_parse_user_id(user_id), limit=limit)

    async def search_text(self, user_id: str | UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """Stored items whose content contains `text` (case-insensitive)."""
        if not text.strip():
            raise InvalidMemoryInputError("search text must not be empty")
        _check_text(text, "search text", _MAX_ENTITY_CHARS)
        return await self.store.search_text(_parse_user_id(user_id), text, limit=limit)

    async def forget(self, user_id: str | UUID, item_id: str | UUID) -> bool:
        """Delete one stored item of the user; returns whether it existed."""
        return await self.store.delete(_parse_user_id(user_id), _parse_item_id(item_id))

    async def backend_status(self) -> BackendStatus:
        """Which backend serves long-term memory, whether the database answers (pinged now), the journal's
        length, the last connection error and the fallback/replay counters (seed 001's
        `get_backend_status`)."""
        if isinstance(self.store, ResilientStore):
            return await self.store.status()
        return await plain_status(self.store, require_pg_memory=self.settings.require_pg_memory)

    def describe(self) -> dict[str, Any]:
        """Backend, extractor and counters, for logs and status pages."""
        return {
            "backend": self.store.backend_name,
            "database_url": self.database_url,
            "extractor": self.extractor.name,
            "live_sessions": len(self.sessions),
            "stats": {name: getattr(self.stats, name) for name in MemoryStats.__slots__},
        }


def _outcome(items: Sequence[MemoryItem], records: Sequence[MemoryRecord], folded: int) -> WriteOutcome:
    """What a write did, read from the rows the store returned (written rows, then superseded ones)."""
    facts = [r for r in records if r.kind == "fact"]
    current = [r for r in facts if r.invalid_at is None]
    landed = {r.content_hash for r in current}
    # A fact item whose own hash is not among the rows written was merged into a similar stored fact.
    redirected = sum(1 for i in items if i.kind == "fact" and i.content_hash not in landed)
    inserted = sum(1 for r in current if r.relevance_count == 0)
    return WriteOutcome(
        stored=[fact_from_record(r) for r in current],
        inserted=inserted,
        reinforced=len(current) - inserted,
        near_duplicates=folded + redirected,
        superseded=[fact_from_record(r) for r in facts if r.invalid_at is not None],
    )


def _make_note(**fields: Any) -> Note:
    try:
        return Note(**fields)
    except ValidationError as exc:
        raise InvalidMemoryInputError(f"cannot remember this: {exc}") from None


def _parse_item_id(item_id: str | UUID) -> UUID:
    if isinstance(item_id, UUID):
        return item_id
    try:
        return UUID(str(item_id))
    except ValueError:
        raise InvalidMemoryInputError(f"memory item ids are UUIDs, got {item_id!r}") from None
