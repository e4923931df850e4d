"""`LongTermFacade`: the facade's long-term memory: writes, fact history, extraction, remember and search."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from ..conversions import fact_from_record
from ..errors import InvalidMemoryInputError
from ..extraction.policy import ExtractionRun
from ..models import FactCategory, MemorizedFact, MemoryUpdate, Message
from ..quality import WriteOutcome
from ..quality.outcome import NoteBatchOutcome
from ..retrieval import ScoredMemory
from ..rows import MemoryRecord
from ..validation import (
    check_session_id,
    parse_user_id,
)
from ..write.notes import Note
from .short_term import ShortTermFacade

__all__ = ["LongTermFacade"]


class LongTermFacade(ShortTermFacade):
    """Long-term memory operations of `MemoryManager`."""

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
        return await self._writer.update(update)

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
        return self._writer.admission.admit(fact, parse_user_id(user_id))

    def sanitize_fact(self, fact: MemorizedFact) -> MemorizedFact | None:
        """The sensitive-data hook every write path calls before a fact is stored.

        Returns the fact with payment cards, IBANs, national ids, passwords and API keys replaced by
        ``[redacted <kind>]`` and clinical details reduced to a non-clinical `health_note`, or None when
        nothing storable is left (only sensitive data, or clinical detail with no practical consequence).
        Counted in `stats` and logged without the sensitive text. Pure otherwise: nothing is written.
        The rules: `memory_plugin.privacy.sanitize_fact_text`.
        """
        return self._writer.admission.sanitize_fact(fact)

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
        return (await self._extraction.extract(messages, parse_user_id(user_id), known_facts=known_facts)).facts

    async def remember_from_session(self, session_id: str, user_id: str | UUID) -> list[MemorizedFact]:
        """Extract facts from the session's messages not extracted yet and store them, now. Failures are
        reported (logged, counted) and return []; they never lose the session, and the messages stay pending
        for the next extraction."""
        self._check_open()
        uid = parse_user_id(user_id)
        if await self._consent.paused(uid):
            return []
        run = await self._extraction.run(check_session_id(session_id), uid, force=True)
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
        if await self._consent.paused(uid):
            return ExtractionRun()
        return await self._extraction.run(check_session_id(session_id), uid, end_of_request=end_of_request)

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
        sensitive: bool = False,
    ) -> MemoryRecord:
        """Store `content` as given, without a model call (mem0's `infer=False`), with its embedding.

        Only an exact repeat (same category, content and metadata) merges into the stored memory, reinforcing
        it; anything else is a new memory. Sensitive data is redacted first, as for extracted facts. Returns
        the stored row. Raises `InvalidMemoryInputError` for bad input, or when nothing is left once the
        sensitive-data filter has run (nothing is stored). `sensitive=True` stores it encrypted (needs
        `MEMORY_ENCRYPTION_KEYS`, else `EncryptionKeyError`): shown to its owner and in the context, never
        found by `search` (docs/privacy.md).

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
            sensitive=sensitive,
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
        return await self._writer.remember_many(uid, notes)

    async def search(self, user_id: str | UUID, query: str, *, limit: int = 10) -> list[ScoredMemory]:
        """The user's memories that best answer `query`, best first, each with its score and the score's parts.

        One round trip: vector similarity, full-text and (optionally) trigram relevance, the neighbouring turns,
        the speaker and dates the question names, fused and adjusted by importance, confidence and recency,
        over valid, unexpired facts only (`public.memory_search`). The question is embedded once (cached);
        if the embedder fails the search runs on the text signals (counted in `stats.embedding_failures`).
        """
        self._check_open()
        return await self._searcher.search(parse_user_id(user_id), query, limit=limit)

    # --- embeddings ----------------------------------------------------------------------------------------------
    async def embedding_backlog(self, user_id: str | UUID) -> int:
        """How many of the user's facts have no vector of the current embedding model (0 without one)."""
        self._check_open()
        if self.embedder is None:
            return 0
        uid = parse_user_id(user_id)
        return len(await self.store.embedding_backlog(uid, self.embedder.name, limit=1_000_000))

    async def reembed(self, user_id: str | UUID, *, on_progress: Callable[[int], None] | None = None) -> int:
        """Give each of the user's facts a vector of the current embedding model (`memory-plugin reembed`), in
        batches, as the user (RLS applies as for any write); `on_progress(n)` after each batch. Returns the
        vectors stored (0 without an embedding model)."""
        self._check_open()
        if self.embedder is None:
            return 0
        from ..embeddings.reembed import reembed_user

        return await reembed_user(self.store, self.embedder, parse_user_id(user_id), on_progress=on_progress)
