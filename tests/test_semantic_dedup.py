"""Near-duplicates by embedding similarity (`memory_plugin/quality/semantic.py`): a fact whose vector is close
to a current fact's (same user, category, guard and model) reinforces it instead of adding a row. The rule
tests use an embedder mapping chosen texts to chosen vectors; the last test uses the real offline MiniLM on
Spanish and English paraphrases."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from uuid import UUID

import pytest
from pydantic_ai import Embedder
from pydantic_ai.embeddings import EmbeddingResult, EmbeddingSettings, TestEmbeddingModel
from pydantic_ai.embeddings.result import EmbedInputType

from memory_plugin import MemorizedFact, MemoryManager, MemoryUpdate
from memory_plugin.embeddings import MemoryEmbedder, local_embedder
from memory_plugin.quality import WriteOutcome
from memory_plugin.quality.rules import WriteRules
from memory_plugin.quality.semantic import DEFAULT_EMBEDDING_THRESHOLD, cosine_similarity

DIM = 384


def _unit(k: int) -> list[float]:
    v = [0.0] * DIM
    v[k] = 1.0
    return v


def _at(k: int, j: int, similarity: float) -> list[float]:
    """A unit vector whose cosine with `_unit(k)` is `similarity`."""
    v = [0.0] * DIM
    v[k] = similarity
    v[j] = math.sqrt(1 - similarity**2)
    return v


class ChosenVectors(TestEmbeddingModel):
    """Each known text gets its chosen vector; any other text a vector of its own."""

    __test__ = False

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        super().__init__("chosen", dimensions=DIM)
        self.vectors = vectors

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        result = await super().embed(inputs, input_type=input_type, settings=settings)
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        vectors = [self.vectors.get(t, _unit(300 + hash(t) % 80)) for t in texts]
        return dataclasses.replace(result, embeddings=vectors)


# Every pair is as similar as the vectors say, whatever the words: the guard is all that keeps pairs apart.
VECTORS = {
    "Le gusta el aluminio 7075": _unit(0),
    "Prefiere el aluminio 7075": _at(0, 1, 0.90),  # a paraphrase (above 0.85)
    "Trabaja con aluminio 7075 a veces": _at(0, 2, 0.80),  # related, below the threshold
    "Aluminio 6061 para prototipos": _at(0, 3, 0.99),  # another alloy: the guard's numbers differ
    "Recibe entregas solo los viernes por la mañana": _unit(10),
    "Recibe entregas solo los lunes por la mañana": _at(10, 11, 0.99),  # another weekday: the guard's value
    "Prefers black anodizing": _unit(20),
    "Does not want black anodizing": _at(20, 21, 0.99),  # negated
    "Likes a black anodized finish": _at(20, 22, 0.95),
    "Prefers red anodizing": _at(20, 23, 0.99),  # another colour
}


def manager(memory: MemoryManager, name: str = "chosen", **settings: object) -> MemoryManager:
    emb = MemoryEmbedder(Embedder(ChosenVectors(VECTORS)), name=name)
    return MemoryManager(memory.settings.model_copy(update=settings), memory.store, embedder=emb)


def fact(content: str, *, importance: int = 3, confidence: float = 0.8, replaces: UUID | None = None) -> MemorizedFact:
    return MemorizedFact(
        content=content,
        category="preference",
        confidence=confidence,
        source="explicit",
        importance=importance,
        replaces=replaces,
    )


async def write(memory: MemoryManager, user_id: UUID, *facts: MemorizedFact) -> WriteOutcome:
    return await memory.update_memory_detailed(MemoryUpdate(user_id=user_id, new_facts=list(facts)))


async def current(memory: MemoryManager, user_id: UUID) -> list[MemorizedFact]:
    return await memory.fact_history(user_id, include_invalid=False)


async def test_a_paraphrase_reinforces_the_stored_fact(any_memory: MemoryManager, user_id: UUID) -> None:
    memory = manager(any_memory)
    await write(memory, user_id, fact("Le gusta el aluminio 7075", importance=2, confidence=0.7))
    outcome = await write(memory, user_id, fact("Prefiere el aluminio 7075", importance=4, confidence=0.8))
    assert (outcome.inserted, outcome.reinforced, outcome.near_duplicates) == (0, 1, 1)
    (stored,) = await current(memory, user_id)
    assert stored.content == "Le gusta el aluminio 7075"  # the stored wording stays
    assert stored.relevance_count == 1
    assert stored.importance == 4  # the max
    assert stored.confidence == pytest.approx(0.9)  # max(0.7, 0.8) + the reinforcement step
    # Stated again and again: bounded at 1.
    for _ in range(3):
        await write(memory, user_id, fact("Prefiere el aluminio 7075"))
    (stored,) = await current(memory, user_id)
    assert (stored.confidence, stored.relevance_count) == (1.0, 4)


async def test_below_the_threshold_or_with_another_guard_a_fact_gets_its_own_row(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    memory = manager(any_memory)
    await write(memory, user_id, fact("Le gusta el aluminio 7075"))
    await write(memory, user_id, fact("Recibe entregas solo los viernes por la mañana"))
    await write(memory, user_id, fact("Prefers black anodizing"))
    for other in (
        "Trabaja con aluminio 7075 a veces",  # 0.80
        "Aluminio 6061 para prototipos",  # 0.99, other numbers
        "Recibe entregas solo los lunes por la mañana",  # 0.99, another weekday
        "Does not want black anodizing",  # 0.99, negated
        "Prefers red anodizing",  # 0.99, another colour
    ):
        outcome = await write(memory, user_id, fact(other))
        assert (outcome.inserted, outcome.near_duplicates) == (1, 0), other


async def test_the_fact_a_new_one_replaces_is_superseded_not_reinforced(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    memory = manager(any_memory)
    (old,) = (await write(memory, user_id, fact("Prefers black anodizing"))).stored
    assert old.id is not None
    outcome = await write(memory, user_id, fact("Likes a black anodized finish", replaces=old.id))
    assert outcome.inserted == 1
    assert [f.content for f in outcome.superseded] == ["Prefers black anodizing"]
    assert [f.content for f in await current(memory, user_id)] == ["Likes a black anodized finish"]


async def test_vectors_of_another_model_are_never_compared(any_memory: MemoryManager, user_id: UUID) -> None:
    await write(manager(any_memory, "model-a"), user_id, fact("Le gusta el aluminio 7075"))
    outcome = await write(manager(any_memory, "model-b"), user_id, fact("Prefiere el aluminio 7075"))
    assert (outcome.inserted, outcome.near_duplicates) == (1, 0)


async def test_paraphrases_in_one_write_fold_into_the_first(any_memory: MemoryManager, user_id: UUID) -> None:
    memory = manager(any_memory)
    outcome = await write(
        memory, user_id, fact("Prefers black anodizing"), fact("Likes a black anodized finish", importance=5)
    )
    assert (outcome.inserted, outcome.near_duplicates) == (1, 1)
    (stored,) = await current(memory, user_id)
    assert (stored.content, stored.importance) == ("Prefers black anodizing", 5)


async def test_a_threshold_above_one_turns_the_rule_off(any_memory: MemoryManager, user_id: UUID) -> None:
    memory = manager(any_memory, dedup_embedding_threshold=2.0)
    await write(memory, user_id, fact("Le gusta el aluminio 7075"))
    outcome = await write(memory, user_id, fact("Prefiere el aluminio 7075"))
    assert outcome.inserted == 1


async def test_a_replayed_write_reinforces_once(pg_memory: MemoryManager, user_id: UUID) -> None:
    from uuid import uuid4

    from memory_plugin.write.items import items_from_update

    memory = manager(pg_memory)
    await write(memory, user_id, fact("Le gusta el aluminio 7075"))
    items = await memory._writer.embed_items(
        items_from_update([fact("Prefiere el aluminio 7075")], None, None, [], None)
    )
    write_id = uuid4()
    for _ in range(2):
        rows = await memory.store.upsert(user_id, items, WriteRules(reinforcement_step=0.1), write_id=write_id)
        assert [(r.content, r.relevance_count) for r in rows] == [("Le gusta el aluminio 7075", 1)]


# Measured with the offline all-MiniLM-L6-v2 (cosine similarity; README "Keeping memory small, true and
# current" lists them). Merged at the default threshold 0.85:
MINILM_MERGED = [
    ("Works in the aerospace sector", "Works in aerospace"),  # 0.93
    ("Trabaja en el sector aeroespacial", "Su empresa es del sector aeroespacial"),  # 0.86
]
# Paraphrases the model rates lower (kept apart: MiniLM is trained on English; across languages, lower still):
MINILM_PARAPHRASES_APART = [
    ("Requiere certificado de material 3.1", "Necesita el certificado 3.1 de material en todos los pedidos"),  # 0.83
    ("Wants deliveries on Monday", "Prefers to receive deliveries on Mondays"),  # 0.83
    ("Prefiere anodizado negro", "Le gusta el anodizado en negro"),  # 0.82
    ("Prefiere el aluminio 7075", "Le gusta el aluminio 7075"),  # 0.79
    ("Prefers black anodizing", "Likes a black anodized finish"),  # 0.71
    ("Prefiere anodizado negro", "Prefers black anodizing"),  # 0.51
]
# Different facts with the same guard, the closest of which the threshold alone keeps apart:
MINILM_DIFFERENT = [
    ("Su contacto de compras es Ana García", "Su contacto de compras es Luis Pérez"),  # 0.84
    ("Needs fast delivery", "Needs cheap delivery"),  # 0.79
    ("Trabaja en el sector aeroespacial", "Trabaja en el sector médico"),  # 0.64
]


async def test_real_paraphrases_with_the_offline_model(pg_memory: MemoryManager) -> None:
    from uuid import uuid4

    memory = MemoryManager(pg_memory.settings, pg_memory.store, embedder=local_embedder())
    assert memory.settings.dedup_embedding_threshold == DEFAULT_EMBEDDING_THRESHOLD == 0.85
    for pairs, merged in ((MINILM_MERGED, True), (MINILM_PARAPHRASES_APART, False), (MINILM_DIFFERENT, False)):
        for a, b in pairs:
            user = uuid4()
            await write(memory, user, fact(a))
            outcome = await write(memory, user, fact(b))
            assert (outcome.near_duplicates, outcome.inserted) == ((1, 0) if merged else (0, 1)), (a, b)
    # The threshold's margins on these pairs (the stored vectors are half precision: 1e-3).
    assert memory.embedder is not None
    vectors = await memory.embedder.embed_documents([t for a, b in MINILM_MERGED + MINILM_DIFFERENT for t in (a, b)])
    sims = [cosine_similarity(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    assert min(sims[: len(MINILM_MERGED)]) > 0.855
    assert max(sims[len(MINILM_MERGED) :]) < 0.845
