"""The write rules of the in-memory store and of PostgreSQL agree on a few hundred generated facts.

`InMemoryStore.upsert` re-implements `public.memory_upsert_items` / `memory_upsert_embedded` in Python (it is the
store the manager falls back to during an outage, and the one unit tests use). A seeded generator writes the
same batches through both: exact repeats, rewordings that add or drop a word (trigram near-duplicates),
rewordings that share only their meaning (embedding near-duplicates, from a deterministic fake embedder whose
vectors are built around one direction per meaning), slot changes (a budget, a lead time, the stance on a
material), `replaces` and single-valued preferences. After every batch the stored facts (current and history)
must be the same: content, category, confidence, relevance count, importance, source, slot, validity times
and which fact superseded which. The first batch that differs is reported with its items.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
import pytest_asyncio

from memory_plugin import InMemoryStore, MemorizedFact, MemorySettings, PostgresStore, UserPreferences
from memory_plugin.models import FactCategory, FactSource
from memory_plugin.quality.rules import WriteRules
from memory_plugin.rows import MemoryItem, MemoryRecord
from memory_plugin.store import LongTermStore
from memory_plugin.text import content_hash
from memory_plugin.write.items import items_from_update

SETTINGS = MemorySettings()
RULES = WriteRules(
    reinforcement_step=SETTINGS.reinforcement_step,
    near_duplicate_threshold=SETTINGS.near_duplicate_threshold,
    embedding_threshold=SETTINGS.dedup_embedding_threshold,
)
MODEL = "fake-embedder-384"
DIMENSIONS = 384  # the width of memory_search_docs' vectors
# Per-component noise of a rewording's vector around its meaning: cosine ≈ 1 / sqrt(1 + 384 · 0.01²) ≈ 0.98,
# well above the embedding threshold (0.85) even in the half precision SQL compares in; unrelated meanings
# are near-orthogonal (|cosine| ≈ 0.05).
NOISE = 0.01


@dataclass(frozen=True)
class Meaning:
    """One thing a user can say, in several wordings: `words` (reworded by adding or dropping a word) and
    `paraphrases` (other words, same meaning)."""

    category: FactCategory
    words: str
    paraphrases: tuple[str, ...]


MEANINGS = (
    Meaning(
        "requirement",
        "Needs material certificates with every delivery of machined parts",
        ("Every shipment of machined parts must include the mill certificates",),
    ),
    Meaning(
        "fact",
        "Quality inspections are done by the customer in the Zaragoza plant",
        ("The client inspects incoming quality at its Zaragoza factory",),
    ),
    Meaning(
        "requirement",
        "Wants drawings reviewed by engineering before production starts",
        ("Engineering has to approve the drawings prior to manufacturing",),
    ),
    Meaning(
        "feedback",
        "Liked the surface finish on the last batch of brackets",
        ("Was happy with how smooth the recent brackets came out",),
    ),
    Meaning(
        "routine",
        "Goes to the gym every Tuesday morning before work",
        ("Trains at the gym on Tuesday mornings ahead of the workday",),
    ),
    Meaning(
        "contact",
        "Su contacto de compras es Marta Ruiz del departamento de logística",
        ("Marta Ruiz, de logística, lleva sus compras",),
    ),
    Meaning(
        "goal",
        "Quiere reducir el coste de mecanizado de las carcasas metálicas",
        ("Busca abaratar el mecanizado de sus carcasas de metal",),
    ),
    Meaning(
        "fact",
        "Runs a small workshop with three CNC lathes and one milling centre",
        ("Owns a little shop with three CNC turning machines plus a mill",),
    ),
)
FILLERS = ("always", "usually", "really", "also", "siempre", "normalmente")

BUDGETS = (800, 1000, 1500, 2000, 3000)
LEAD_TIMES = (5, 7, 10, 14)
MATERIALS = ("aluminium 7075", "titanium", "brass", "PEEK")
CITIES = ("Bilbao", "Vigo", "Sevilla", "Valencia")
QUANTITIES = ("50 units", "200 units", "1,000 units")


def slot_fact(rng: random.Random) -> tuple[FactCategory, str]:
    """A fact with a slot: a budget, a lead time or the stance on a material, with a random value."""
    kind = rng.choice(("budget", "budget_es", "lead", "lead_es", "prefers", "stopped", "never"))
    if kind == "budget":
        return "constraint", f"Budget limited to {rng.choice(BUDGETS)}€ per order"
    if kind == "budget_es":
        return "constraint", f"El presupuesto máximo es de {rng.choice(BUDGETS)} euros por pedido"
    if kind == "lead":
        return "constraint", f"Lead time must be under {rng.choice(LEAD_TIMES)} days"
    if kind == "lead_es":
        return "requirement", f"Necesita un plazo de entrega de {rng.choice(LEAD_TIMES)} días"
    material = rng.choice(MATERIALS)
    if kind == "prefers":
        return "preference", f"Prefers {material} for prototypes"
    if kind == "stopped":
        return "preference", f"No longer uses {material}"
    return "rejection", f"Never suggest {material}"


def reworded(rng: random.Random, words: str) -> str:
    """`words` with one word added (a filler) or dropped: a trigram near-duplicate, or sometimes not."""
    tokens = words.split()
    if rng.random() < 0.5 and len(tokens) > 4:
        del tokens[rng.randrange(1, len(tokens))]
    else:
        tokens.insert(rng.randrange(1, len(tokens)), rng.choice(FILLERS))
    return " ".join(tokens)


@dataclass
class Said:
    """One generated statement: a fact (with its vector, if any) or a preference, and what it replaces."""

    how: str
    """Which rule it exercises: new, repeat, reworded, paraphrase, slot, replaces, preferences."""
    category: FactCategory
    content: str
    confidence: float
    importance: int
    source: FactSource
    at: datetime
    vector: tuple[float, ...] | None
    near_meaning: bool
    """Whether `vector` is near its meaning's direction (False: its own direction, or no vector)."""
    replaces_content: str | None = None
    """The content of a current fact it replaces (resolved to that fact's id in each store)."""
    preference: UserPreferences | None = None


@dataclass
class Generator:
    """Seeded statements, each later than the previous one (so the latest of a slot is never a tie)."""

    rng: random.Random
    clock: datetime
    directions: dict[str, tuple[float, ...]] = field(default_factory=dict)
    said: list[Said] = field(default_factory=list)

    def _unit(self, values: Sequence[float]) -> tuple[float, ...]:
        norm = math.sqrt(sum(v * v for v in values))
        return tuple(v / norm for v in values)

    def direction(self, meaning: str) -> tuple[float, ...]:
        """The meaning's own direction (random, fixed for the run)."""
        if meaning not in self.directions:
            self.directions[meaning] = self._unit([self.rng.gauss(0, 1) for _ in range(DIMENSIONS)])
        return self.directions[meaning]

    def vector(self, meaning: str) -> dict[str, Any]:
        """`Said`'s vector fields: near the meaning's direction, else one of its own (one time in four),
        else none (one time in five)."""
        roll = self.rng.random()
        if roll < 0.2:
            return {"vector": None, "near_meaning": False}
        if roll < 0.45:
            return {"vector": self._unit([self.rng.gauss(0, 1) for _ in range(DIMENSIONS)]), "near_meaning": False}
        base = self.direction(meaning)
        return {"vector": self._unit([b + self.rng.gauss(0, NOISE) for b in base]), "near_meaning": True}

    def statement(self, current_facts: Sequence[str]) -> Said:
        """One statement, of a kind drawn at random."""
        rng = self.rng
        self.clock += timedelta(minutes=rng.randint(1, 90))
        base: dict[str, Any] = {
            "confidence": rng.choice((0.5, 0.6, 0.7, 0.8, 0.9, 0.95)),
            "importance": rng.randint(1, 5),
            "source": rng.choice(("explicit", "inferred")),
            "at": self.clock,
        }
        roll = rng.random()
        meaning = rng.choice(MEANINGS)
        if roll < 0.15 and self.said:  # an exact repeat of something said before, with the same vector
            said = replace(rng.choice(self.said), **base, how="repeat", replaces_content=None)
        elif roll < 0.3:
            said = Said("new", meaning.category, meaning.words, **self.vector(meaning.words), **base)
        elif roll < 0.5:
            text = reworded(rng, meaning.words)
            said = Said("reworded", meaning.category, text, **self.vector(meaning.words), **base)
        elif roll < 0.62:
            text = rng.choice(meaning.paraphrases)
            said = Said("paraphrase", meaning.category, text, **self.vector(meaning.words), **base)
        elif roll < 0.85:
            category, text = slot_fact(rng)
            said = Said("slot", category, text, **self.vector(text), **base)
        elif roll < 0.94 and current_facts:
            text, old = f"Moved the workshop to {rng.choice(CITIES)}", rng.choice(current_facts)
            said = Said("replaces", "fact", text, **self.vector(text), replaces_content=old, **base)
        else:
            prefs = UserPreferences(
                preferred_materials=[rng.choice(MATERIALS)], typical_quantities=rng.choice(QUANTITIES)
            )
            said = Said("preferences", "preference", "", vector=None, near_meaning=False, preference=prefs, **base)
        self.said.append(said)
        return said


def items_for(batch: Sequence[Said], ids_by_content: dict[str, UUID], session_id: str) -> list[MemoryItem]:
    """The batch as one store's items: `replaces` resolved to that store's id of the named fact."""
    facts = [
        MemorizedFact(
            content=s.content,
            category=s.category,
            confidence=s.confidence,
            source=s.source,
            importance=s.importance,
            timestamp=s.at,
            source_message_ids=(f"m-{s.at.timestamp():.0f}",),
            replaces=ids_by_content.get(s.replaces_content) if s.replaces_content else None,
        )
        for s in batch
        if s.preference is None
    ]
    preferences = next((s.preference for s in reversed(batch) if s.preference is not None), None)
    vectors: dict[str, tuple[float, ...]] = {}
    for s in batch:
        if s.vector is not None:
            vectors.setdefault(s.content, s.vector)
    items = items_from_update(facts, preferences, None, [], session_id)
    return [
        replace(item, embedding=vectors[item.content], embedding_model=MODEL)
        if item.kind == "fact" and item.content in vectors
        else item
        for item in items
    ]


_SUPERSEDED_SUFFIX = re.compile(r":superseded:.*$")


def comparable(records: Sequence[MemoryRecord]) -> list[tuple[Any, ...]]:
    """What the write rules decide about each row, without what differs by design (ids, write times)."""
    by_id = {r.id: r for r in records}

    def superseder(r: MemoryRecord) -> str | None:
        if r.superseded_by is None:
            return None
        new = by_id.get(r.superseded_by)
        return new.content if new is not None else "<not among the rows>"

    return sorted(
        (
            r.kind,
            r.category,
            r.content,
            round(r.confidence, 4),  # real in SQL, float in Python
            r.relevance_count,
            r.importance,
            r.source,
            r.slot,
            # Facts carry the time they were said; preferences are stamped with each store's clock.
            *((r.created_at, r.last_reinforced_at, r.invalid_at) if r.kind == "fact" else ()),
            superseder(r),
            _SUPERSEDED_SUFFIX.sub(":superseded", r.content_hash),
        )
        for r in records
    )


async def stored(store: LongTermStore, user_id: UUID) -> list[MemoryRecord]:
    return await store.list_records(user_id, limit=10_000)


def current_ids(records: Sequence[MemoryRecord], now: datetime) -> dict[str, UUID]:
    return {r.content: r.id for r in records if r.kind == "fact" and r.is_current(now)}


def fact_hash(said: Said) -> str:
    return content_hash("fact", said.category, said.content)


def describe(batch: Sequence[Said]) -> str:
    return "\n".join(
        f"  {s.category}: {s.content or s.preference!r} (vector={'yes' if s.vector else 'no'},"
        f" replaces={s.replaces_content!r}, conf={s.confidence}, at={s.at:%m-%d %H:%M})"
        for s in batch
    )


def difference(ram: list[tuple[Any, ...]], pg: list[tuple[Any, ...]]) -> str:
    only_ram = [row for row in ram if row not in pg]
    only_pg = [row for row in pg if row not in ram]
    return (
        "in memory only:\n"
        + "\n".join(f"  {r}" for r in only_ram)
        + "\npostgres only:\n"
        + "\n".join(f"  {r}" for r in only_pg)
    )


@pytest_asyncio.fixture(loop_scope="session")
async def pg_store(database_url: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.connect(database_url, max_size=2)
    yield store
    await store.close()


# One seed in the quick run (about 3 s); the others with the slow tests.
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
async def test_memory_and_postgres_apply_the_same_write_rules(pg_store: PostgresStore, seed: int) -> None:
    rng = random.Random(seed)
    generator = Generator(rng, clock=datetime.now(UTC).replace(microsecond=0) - timedelta(days=90))
    ram = InMemoryStore()
    user_id = uuid4()
    stores: dict[str, LongTermStore] = {"memory": ram, "postgres": pg_store}
    rows: dict[str, list[MemoryRecord]] = {"memory": [], "postgres": []}
    written = 0
    batch_number = 0
    merged: set[tuple[str, bool]] = set()  # (how, near_meaning) of statements that got no row of their own
    while written < 300:
        batch_number += 1
        now = datetime.now(UTC)
        current = sorted(current_ids(rows["memory"], now))
        batch = [generator.statement(current) for _ in range(rng.randint(1, 8))]
        written += len(batch)
        session_id = rng.choice(("s1", "s2"))
        context = f"seed {seed}, batch {batch_number} (after {written} statements):\n{describe(batch)}\n"
        returned: dict[str, list[tuple[Any, ...]]] = {}
        for name, store in stores.items():
            items = items_for(batch, current_ids(rows[name], now), session_id)
            try:
                result = await store.upsert(user_id, items, RULES)
            except Exception as exc:
                raise AssertionError(f"{name} failed on {context}") from exc
            rows[name] = await stored(store, user_id)
            returned[name] = comparable(result)
        state = {name: comparable(records) for name, records in rows.items()}
        assert state["memory"] == state["postgres"], context + difference(state["memory"], state["postgres"])
        assert returned["memory"] == returned["postgres"], context + difference(
            returned["memory"], returned["postgres"]
        )
        hashes = {r.content_hash for r in rows["postgres"]}
        merged |= {(s.how, s.near_meaning) for s in batch if s.content and fact_hash(s) not in hashes}
    # The generator reached every rule: repeats, rewordings merged by trigrams and by vectors, superseded
    # slots and replaced facts.
    final = rows["postgres"]
    assert any(r.relevance_count > 0 for r in final if r.kind == "fact")
    assert ("paraphrase", True) in merged  # by vector: a paraphrase shares few trigrams
    assert ("reworded", False) in merged  # by trigrams: its vector points elsewhere, or it has none
    assert any(r.superseded_by is not None and r.slot is not None for r in final)
    assert any(r.superseded_by is not None and r.slot is None for r in final)
