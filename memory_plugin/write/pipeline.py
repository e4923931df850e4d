"""`WritePipeline`: every write to long-term memory goes through here.

admit (checks, threshold, sensitive data, dates) → rows → fold repeats and near-duplicates within the write
→ embed → fold paraphrases by meaning → upsert (the store applies the same rules against what is stored)
→ what the write did (`WriteOutcome`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from ..conversions import fact_from_record
from ..embeddings import MemoryEmbedder
from ..errors import EmbeddingError, InvalidMemoryInputError
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, MemoryUpdate
from ..quality import WriteOutcome, fold_near_duplicates, fold_semantic_duplicates
from ..quality.rules import WriteRules
from ..quality.slots import keep_latest_per_slot
from ..rows import MemoryItem, MemoryRecord
from ..settings import MemorySettings
from ..store import LongTermStore
from ..validation import check_session_id, check_text
from .admission import FactAdmission
from .items import items_from_update
from .notes import Note, note_item
from .rate_limit import WriteRateLimit

__all__ = ["WritePipeline", "WriteStats"]


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

    async def update(self, update: MemoryUpdate, *, write_id: UUID | None = None) -> WriteOutcome:
        """Persist a `MemoryUpdate`; see `MemoryManager.update_memory_detailed`. `write_id`: the store's
        idempotency key (a background job's write, retried after a crash, is applied once)."""
        if not isinstance(update, MemoryUpdate):
            raise InvalidMemoryInputError(f"update must be a MemoryUpdate, got {type(update).__name__}")
        if update.session_id is not None:
            check_session_id(update.session_id)
        facts = [self.admission.admit(f, update.user_id) for f in update.new_facts]
        kept = [f for f in facts if f is not None]
        preferences, project, patterns = self.admission.sanitize_parts(update)
        items = items_from_update(kept, preferences, project, patterns, update.session_id)
        # Within this write: the last value of a slot wins, and near-duplicates fold into the first wording.
        items, _ = keep_latest_per_slot(items)
        items, folded = fold_near_duplicates(items, self.rules.near_duplicate_threshold)
        if not items:
            return WriteOutcome()
        items = await self.embed_items(items)
        # Then paraphrases by meaning (same category, guard and model), once the facts have their vectors.
        items, folded_by_meaning = fold_semantic_duplicates(items, self.rules.embedding_threshold)
        folded += folded_by_meaning
        self.rate_limit.take(update.user_id, len(items))
        records = await self.store.upsert(update.user_id, items, self.rules, write_id=write_id)
        outcome = outcome_of(items, records, folded)
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

    async def remember_many(self, user_id: UUID, notes: Sequence[Note]) -> list[MemoryRecord]:
        """Store notes as given; see `MemoryManager.remember_many`."""
        items: list[MemoryItem] = []
        for note in notes:
            if not isinstance(note, Note):
                raise InvalidMemoryInputError(f"remember_many takes Note objects, got {type(note).__name__}")
            check_text(note.content, "memory content", self.settings.max_fact_chars)
            if note.session_id is not None:
                check_session_id(note.session_id)
            # The sensitive-data hook of every write path (payment data, ids, secrets, clinical details).
            as_fact = MemorizedFact(
                content=note.content, category=note.category, confidence=note.confidence, source=note.source
            )
            clean = self.admission.sanitize_fact(as_fact)
            if clean is None:
                raise InvalidMemoryInputError("nothing is left to remember once sensitive data is removed")
            if clean is not as_fact:
                note = note.model_copy(update={"content": clean.content, "category": clean.category})
            items.append(note_item(note))
        if not items:
            return []
        # Exact repeats inside the batch are one row (Postgres cannot upsert one row twice in a statement).
        unique = list({item.content_hash: item for item in items}.values())
        self.rate_limit.take(user_id, len(unique))
        unique = await self.embed_items(unique)
        records = await self.store.upsert(user_id, unique, WriteRules(reinforcement_step=self.rules.reinforcement_step))
        self.stats.facts_written += len(records)
        return records

    async def embed_items(self, items: list[MemoryItem]) -> list[MemoryItem]:
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
