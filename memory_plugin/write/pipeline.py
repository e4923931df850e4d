"""`WritePipeline`: every write to long-term memory goes through here.

admit (checks, threshold, sensitive data, dates) → rows → fold repeats and near-duplicates within the write
→ embed → fold paraphrases by meaning → upsert (the store applies the same rules against what is stored)
→ what the write did (`WriteOutcome`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID, uuid5

from ..conversions import fact_from_record
from ..crypto.policy import mark_sensitive
from ..embeddings import MemoryEmbedder
from ..errors import EmbeddingError, InvalidMemoryInputError
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, MemoryUpdate
from ..privacy import redact_json_value, redact_note_text_async
from ..quality import WriteOutcome, fold_near_duplicates, fold_semantic_duplicates
from ..quality.outcome import NoteBatchOutcome, NoteOutcome, NoteStatus, RefusedFact
from ..quality.rules import WriteRules
from ..quality.slots import keep_latest_per_slot
from ..rows import MemoryItem, MemoryRecord
from ..settings import MemorySettings
from ..store import LongTermStore
from ..validation import check_session_id, check_text
from .admission import FactAdmission
from .fact_limit import FactLimit
from .items import items_from_update
from .notes import Note, note_item
from .rate_limit import WriteRateLimit

__all__ = ["WRITE_CHUNK_ITEMS", "WritePipeline", "WriteStats"]

WRITE_CHUNK_ITEMS = 200
"""Most items written in one statement. A write of more is sent in chunks of this size, one after another, inside
the one call (so its outcome still reports every item). With every per-item probe bounded, a 200-fact chunk takes
0.6 s at up to 10,000 stored facts (10,000 facts in 29 s) and at most 2.5 s at load average ~7 on 2 cores
(bench/write_scaling.py), half of the app role's 5 s statement_timeout at worst."""


@dataclass(slots=True)
class WriteStats:
    """What writes did (see `MemoryStats` for each counter)."""

    facts_written: int = 0
    facts_inserted: int = 0
    facts_reinforced: int = 0
    facts_near_duplicates: int = 0
    facts_superseded: int = 0
    facts_embedded: int = 0
    embedding_failures: int = 0
    notes_stored: int = 0
    notes_merged: int = 0
    notes_refused: int = 0
    notes_redacted: int = 0


class WritePipeline:
    """Writes facts, preferences, projects, patterns and notes for a user, in one store round trip each."""

    def __init__(self, settings: MemorySettings, store: LongTermStore, embedder: MemoryEmbedder | None) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.admission = FactAdmission(settings)
        self.stats = WriteStats()
        self.rules = WriteRules(
            reinforcement_step=settings.reinforcement_step,
            near_duplicate_threshold=settings.near_duplicate_threshold,
            embedding_threshold=settings.dedup_embedding_threshold,
        )
        """The thresholds every write is made with (journaled with outage writes)."""
        self.rate_limit = WriteRateLimit(settings.write_rate_per_second, settings.write_burst)
        """Items per user and second (`MemoryLimitError` beyond)."""
        self.fact_limit = FactLimit(settings.max_facts_per_user, store)
        """Fact rows per user (`MemoryLimitError` beyond)."""
        self.encrypting = bool(getattr(store, "seals_sensitive", False))
        """The store seals sensitive items (`store/sealed.py`): they are marked and never embedded; otherwise an
        item marked sensitive is refused."""

    async def update(self, update: MemoryUpdate, *, write_id: UUID | None = None) -> WriteOutcome:
        """Persist a `MemoryUpdate`; see `MemoryManager.update_memory_detailed`. `write_id`: the store's
        idempotency key (a background job's write, retried after a crash, is applied once)."""
        if not isinstance(update, MemoryUpdate):
            raise InvalidMemoryInputError(f"update must be a MemoryUpdate, got {type(update).__name__}")
        if update.session_id is not None:
            check_session_id(update.session_id)
        kept: list[MemorizedFact] = []
        refused: list[RefusedFact] = []
        for index, fact in enumerate(update.new_facts):
            admitted = self.admission.admit_or_refuse(fact, update.user_id)
            if isinstance(admitted, MemorizedFact):
                kept.append(admitted)
            else:
                refused.append(RefusedFact(index, admitted))
        preferences, project, patterns = self.admission.sanitize_parts(update)
        items = items_from_update(kept, preferences, project, patterns, update.session_id, self.settings.vocabulary)
        # Within this write: the last value of a slot wins, and near-duplicates fold into the first wording.
        items, _ = keep_latest_per_slot(items)
        items, folded = fold_near_duplicates(items, self.rules.near_duplicate_threshold)
        if not items:
            return WriteOutcome(refused=refused)
        # Folding by meaning below leaves at least one item: a user with no room for one is refused before
        # the embedding, which a flood would otherwise pay for on every refused write.
        self.rate_limit.check(update.user_id, 1)
        items = mark_sensitive(items, self.settings.sensitive_categories, encrypting=self.encrypting)
        items = await self.embed_items(items)
        # Then paraphrases by meaning (same category, guard and model), once the facts have their vectors.
        items, folded_by_meaning = fold_semantic_duplicates(items, self.rules.embedding_threshold)
        folded += folded_by_meaning
        self.rate_limit.take(update.user_id, len(items))
        await self.fact_limit.check(update.user_id, sum(1 for i in items if i.kind == "fact"))
        records = await self.upsert_chunked(update.user_id, items, self.rules, write_id=write_id)
        outcome = dataclasses.replace(outcome_of(items, records, folded), refused=refused)
        self.fact_limit.added(update.user_id, outcome.inserted)
        self._count(outcome)
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

    async def remember_many(self, user_id: UUID, notes: Sequence[Note]) -> NoteBatchOutcome:
        """Store notes as given, reporting each; see `MemoryManager.remember_many_detailed`."""
        for note in notes:  # invalid input raises before anything is filtered or written
            if not isinstance(note, Note):
                raise InvalidMemoryInputError(f"remember_many takes Note objects, got {type(note).__name__}")
            check_text(note.content, "memory content", self.settings.max_note_chars)
            if note.session_id is not None:
                check_session_id(note.session_id)
        outcomes: dict[int, NoteOutcome] = {}
        accepted: list[tuple[int, MemoryItem, tuple[str, ...]]] = []
        for index, note in enumerate(notes):
            # The sensitive-data hook of every write path: content, and every string of the metadata (the
            # speaker reaches the search table from there), before the hash, the journal or the database.
            redaction = await redact_note_text_async(note.content, consent=self.settings.health_notes)
            meta = redact_json_value(note.metadata)
            kinds = tuple(
                dict.fromkeys((*redaction.redacted, *(f"health:{k}" for k in redaction.clinical), *meta.kinds))
            )
            if redaction.text is None:
                outcomes[index] = NoteOutcome(
                    index, "refused", redacted=kinds, reason="nothing meaningful is left once sensitive data is removed"
                )
                continue
            if kinds:
                note = note.model_copy(update={"content": redaction.text, "metadata": meta.value})
            accepted.append((index, note_item(note), kinds))
        if accepted:
            # Exact repeats inside the batch are one row (Postgres cannot upsert one row twice in a statement).
            unique = list({item.content_hash: item for _, item, _ in accepted}.values())
            self.rate_limit.take(user_id, len(unique))
            await self.fact_limit.check(user_id, len(unique))
            unique = mark_sensitive(unique, self.settings.sensitive_categories, encrypting=self.encrypting)
            unique = await self.embed_items(unique)
            records = await self.upsert_chunked(
                user_id, unique, WriteRules(reinforcement_step=self.rules.reinforcement_step)
            )
            self.fact_limit.added(user_id, sum(1 for r in records if r.relevance_count == 0))
            by_hash = {r.content_hash: r for r in records}
            first_of: dict[str, int] = {}
            for index, item, kinds in accepted:
                record = by_hash[item.content_hash]
                repeat = first_of.setdefault(item.content_hash, index) != index
                status: NoteStatus = "merged" if repeat or record.relevance_count > 0 else "stored"
                outcomes[index] = NoteOutcome(index, status, record=record, redacted=kinds)
        outcome = NoteBatchOutcome([outcomes[i] for i in range(len(notes))])
        self.stats.facts_written += len(outcome.records)
        self.stats.notes_stored += outcome.count("stored")
        self.stats.notes_merged += outcome.count("merged")
        self.stats.notes_refused += outcome.count("refused")
        self.stats.notes_redacted += sum(1 for n in outcome.notes if n.redacted)
        if outcome.refused:
            logger.info("%s %d of %d notes refused by the privacy policy", LOG_PREFIX, len(outcome.refused), len(notes))
        return outcome

    async def upsert_chunked(
        self, user_id: UUID, items: Sequence[MemoryItem], rules: WriteRules, *, write_id: UUID | None = None
    ) -> list[MemoryRecord]:
        """`store.upsert` in statements of at most `WRITE_CHUNK_ITEMS` items, in order; the rows of all of them.

        Items were already folded across the whole write (repeats, slots, near-duplicates), so each chunk's
        rules against stored rows see the chunks before it as stored. With `write_id`, chunk n of a larger
        write is applied once under `uuid5(write_id, n)`: a retried write re-applies only the chunks that
        were not applied. A write of one chunk keeps `write_id` itself.
        """
        if len(items) <= WRITE_CHUNK_ITEMS:
            return await self.store.upsert(user_id, items, rules, write_id=write_id)
        records: list[MemoryRecord] = []
        for n, start in enumerate(range(0, len(items), WRITE_CHUNK_ITEMS)):
            chunk_id = None if write_id is None else uuid5(write_id, str(n))
            records += await self.store.upsert(
                user_id, items[start : start + WRITE_CHUNK_ITEMS], rules, write_id=chunk_id
            )
        return records

    async def embed_items(self, items: list[MemoryItem]) -> list[MemoryItem]:
        """The facts among `items` with their embeddings, computed in batches (one model call per
        `embedding_batch_size` texts). A text longer than `EMBEDDING_WINDOW_CHARS` is embedded as the normalised
        mean of its overlapping windows (`embedding_windows`), so its last words count too. If the embedder fails
        the facts are stored without vectors: counted, logged, found by text until `memory-plugin reembed` fills
        them."""
        embedder = self.embedder
        # Never a sensitive fact: its vector would be stored in the clear (and sent to an embedding API).
        todo = [
            i for i, item in enumerate(items) if item.kind == "fact" and item.embedding is None and not item.sensitive
        ]
        if embedder is None or not todo:
            return items
        windows = [embedding_windows(items[i].content) for i in todo]
        try:
            vectors = await embedder.embed_documents([w for item_windows in windows for w in item_windows])
        except EmbeddingError as exc:
            self.stats.embedding_failures += len(todo)
            logger.warning("%s storing %d facts without embeddings: %s", LOG_PREFIX, len(todo), exc)
            return items
        out = list(items)
        start = 0
        for i, item_windows in zip(todo, windows, strict=True):
            own = vectors[start : start + len(item_windows)]
            start += len(item_windows)
            vector = own[0] if len(own) == 1 else mean_direction(own)
            out[i] = dataclasses.replace(items[i], embedding=vector, embedding_model=embedder.name)
        self.stats.facts_embedded += len(todo)
        return out

    def _count(self, outcome: WriteOutcome) -> None:
        self.stats.facts_written += len(outcome.stored)
        self.stats.facts_inserted += outcome.inserted
        self.stats.facts_reinforced += outcome.reinforced
        self.stats.facts_near_duplicates += outcome.near_duplicates
        self.stats.facts_superseded += len(outcome.superseded)


def outcome_of(items: Sequence[MemoryItem], records: Sequence[MemoryRecord], folded: int) -> WriteOutcome:
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


EMBEDDING_WINDOW_CHARS = 800
"""Longest text embedded in one piece. all-MiniLM-L6-v2 reads 256 word pieces (~1,000 characters of English)
and ignores the rest; 800 leaves room for longer words and other languages."""
EMBEDDING_WINDOW_OVERLAP = 200
"""Characters two neighbouring windows share, so a sentence cut by one window is whole in the next."""


def embedding_windows(text: str) -> list[str]:
    """`text` itself when short; else overlapping windows of at most `EMBEDDING_WINDOW_CHARS` characters that
    cover all of it, cut at spaces where one is near."""
    if len(text) <= EMBEDDING_WINDOW_CHARS:
        return [text]
    windows: list[str] = []
    start = 0
    while True:
        end = min(start + EMBEDDING_WINDOW_CHARS, len(text))
        if end < len(text):
            space = text.rfind(" ", start + EMBEDDING_WINDOW_CHARS // 2, end)
            end = space if space > 0 else end
        windows.append(text[start:end])
        if end >= len(text):
            return windows
        start = max(end - EMBEDDING_WINDOW_OVERLAP, start + 1)
        space = text.find(" ", start, end)
        start = space + 1 if 0 <= space < end else start


def mean_direction(vectors: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    """The normalised mean of `vectors`: one vector for a text embedded in windows."""
    sums = [sum(column) for column in zip(*vectors, strict=True)]
    norm = math.sqrt(sum(x * x for x in sums)) or 1.0
    return tuple(x / norm for x in sums)
