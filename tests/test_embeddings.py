"""Embeddings: computed once per fact at write time, in batches; never mixed across models; rebuilt by
`reembed`; failures degrade to text search and are counted. pydantic-ai's `TestEmbeddingModel` stands in for
a provider, except in the tests of the real offline model."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from pydantic_ai import Embedder
from pydantic_ai.embeddings import EmbeddingResult, EmbeddingSettings, TestEmbeddingModel
from pydantic_ai.embeddings.result import EmbedInputType
from typer.testing import CliRunner

from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate
from memory_plugin.cli import app
from memory_plugin.embeddings import (
    LOCAL_MODEL_NAME,
    OPENAI_MODEL_NAME,
    MemoryEmbedder,
    default_embedder,
    local_embedder,
    model_files,
)
from memory_plugin.embeddings.reembed import reembed_user
from memory_plugin.errors import EmbeddingError

Conn = psycopg.Connection[tuple[object, ...]]


class CountingModel(TestEmbeddingModel):
    """The test model, counting its calls and the texts of each."""

    __test__ = False

    def __init__(self, name: str = "test", *, dimensions: int = 384) -> None:
        super().__init__(name, dimensions=dimensions)
        self.batches: list[int] = []

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        self.batches.append(1 if isinstance(inputs, str) else len(inputs))
        return await super().embed(inputs, input_type=input_type, settings=settings)


class FailingModel(TestEmbeddingModel):
    """A provider that is down."""

    __test__ = False

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        raise RuntimeError("embedding provider unreachable")


def embedder(model: TestEmbeddingModel, name: str, batch_size: int = 64) -> MemoryEmbedder:
    return MemoryEmbedder(Embedder(model), name=name, batch_size=batch_size)


def manager_with(memory: MemoryManager, emb: MemoryEmbedder) -> MemoryManager:
    """Another manager over the same store, with its own embedder."""
    return MemoryManager(memory.settings, memory.store, embedder=emb)


def facts(*texts: str) -> list[MemorizedFact]:
    return [MemorizedFact(content=t, category="requirement", confidence=0.9, source="explicit") for t in texts]


TEXTS = [f"Requirement number {i}: flanges in steel grade S{i}" for i in range(10)]


async def test_facts_are_embedded_once_at_write_time_in_batches(any_memory: MemoryManager, user_id: UUID) -> None:
    model = CountingModel()
    memory = manager_with(any_memory, embedder(model, "test-a", batch_size=4))

    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=facts(*TEXTS)))

    assert model.batches == [4, 4, 2]  # 10 facts, 4 per call
    assert memory.stats.facts_embedded == 10
    hits = await memory.search(user_id, "steel flanges", limit=10)
    again = await memory.search(user_id, "steel flanges", limit=10)
    assert model.batches == [4, 4, 2, 1]  # the question once (then cached); the facts never again
    assert len(hits) == len(again) == 10
    assert all(h.components.vector == pytest.approx(1.0) for h in hits)


async def test_a_cleared_question_cache_asks_the_model_again() -> None:
    model = CountingModel()
    emb = embedder(model, "test-a")

    first = await emb.embed_query("steel flanges")
    await emb.embed_query("steel flanges")
    assert model.batches == [1]  # cached
    emb.clear_cache()
    assert await emb.embed_query("steel flanges") == first
    assert model.batches == [1, 1]


async def test_switching_the_embedding_model_never_mixes_vectors(any_memory: MemoryManager, user_id: UUID) -> None:
    old = manager_with(any_memory, embedder(CountingModel("a"), "test-a"))
    new_embedder = embedder(CountingModel("b"), "test-b")
    new = manager_with(any_memory, new_embedder)
    await old.update_memory(MemoryUpdate(user_id=user_id, new_facts=facts(*TEXTS[:3])))

    # Both models return identical vectors here: only the model name keeps them apart.
    before = await new.search(user_id, "steel flanges", limit=10)
    assert len(before) == 3  # still found, by text
    assert all(h.components.vector == 0 for h in before)
    assert len(await any_memory.store.embedding_backlog(user_id, "test-b")) == 3

    assert await reembed_user(any_memory.store, new_embedder, user_id) == 3

    after = await new.search(user_id, "steel flanges", limit=10)
    assert all(h.components.vector == pytest.approx(1.0) for h in after)
    assert await any_memory.store.embedding_backlog(user_id, "test-b") == []
    assert len(await any_memory.store.embedding_backlog(user_id, "test-a")) == 3  # one vector per fact


async def test_an_embedder_failure_keeps_the_fact_and_search_works_by_text(
    any_memory: MemoryManager, user_id: UUID
) -> None:
    memory = manager_with(any_memory, embedder(FailingModel(dimensions=384), "test-down"))

    stored = await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=facts("Needs PED certificates")))
    assert [f.content for f in stored] == ["Needs PED certificates"]
    assert memory.stats.embedding_failures == 1

    hits = await memory.search(user_id, "which certificates does he need?", limit=5)
    assert [h.memory.content for h in hits] == ["Needs PED certificates"]
    assert memory.stats.embedding_failures == 2  # the question could not be embedded either
    assert len(await any_memory.store.embedding_backlog(user_id, "test-down")) == 1


async def test_vectors_of_the_wrong_dimension_are_refused(any_memory: MemoryManager, user_id: UUID) -> None:
    small = embedder(TestEmbeddingModel(dimensions=8), "test-8d")
    with pytest.raises(EmbeddingError, match="384"):
        await small.embed_documents(["x"])
    memory = manager_with(any_memory, small)
    await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=facts("Needs anodising")))
    assert memory.stats.embedding_failures == 1
    assert [r.content for r in await memory.list_memory(user_id)] == ["Needs anodising"]


async def test_every_vector_sits_beside_its_text_and_model(
    pg_memory: MemoryManager, user_id: UUID, admin_conn: Conn
) -> None:
    await pg_memory.remember(user_id, "Ships to Bilbao on Fridays")

    rows = admin_conn.execute(
        "select content, embedding_model, extensions.vector_dims(embedding) from public.memory_search_docs"
        " where user_id = %s",
        (user_id,),
    ).fetchall()

    assert rows == [("Ships to Bilbao on Fridays", LOCAL_MODEL_NAME, 384)]


async def test_the_offline_model_embeds_meaning() -> None:
    local = local_embedder()
    hiking, trails, invoice = await local.embed_documents(
        ["She loves hiking in the mountains", "Walking mountain trails is her hobby", "The invoice is overdue"]
    )

    assert len(hiking) == 384
    assert math.isclose(sum(x * x for x in hiking), 1.0, rel_tol=1e-4)  # normalised
    dot = lambda a, b: sum(x * y for x, y in zip(a, b, strict=True))  # noqa: E731
    assert dot(hiking, trails) > dot(hiking, invoice) + 0.3


async def test_a_question_is_embedded_like_the_same_text_stored_as_a_fact() -> None:
    # Questions take a shorter path through the offline model than batches of facts; the vectors must be
    # the same, or a question would not find its own words.
    local = local_embedder()
    (as_fact,) = await local.embed_documents(["When did Caroline go to the support group?"])
    as_question = await local.embed_query("When did Caroline go to the support group?")

    assert len(as_question) == 384
    assert max(abs(a - b) for a, b in zip(as_fact, as_question, strict=True)) < 1e-5


def test_the_default_embedder_follows_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert default_embedder(MemorySettings(embedding_model="none")) is None
    offline = default_embedder(MemorySettings())
    assert offline is not None
    assert offline.name == LOCAL_MODEL_NAME
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    online = default_embedder(MemorySettings())
    assert online is not None
    assert online.name == f"{OPENAI_MODEL_NAME}@384"  # the dimension is part of the name: 1536-d never mixes


def test_reembed_command_fills_the_backlog_with_a_progress_bar(pg_settings: MemorySettings, user_id: UUID) -> None:
    # Synchronous: the command runs its own event loop, so the facts are written from another one first.
    async def write() -> None:
        async with MemoryManager.open(pg_settings, embedder=embedder(CountingModel("old"), "test-old")) as memory:
            await memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=facts(*TEXTS[:5])))

    asyncio.run(write())
    assert pg_settings.database_url is not None
    env = {
        "MEMORY_DATABASE_URL": pg_settings.database_url.get_secret_value(),
        "MEMORY_EMBEDDING_MODEL": "local",
        "COLUMNS": "120",
    }

    result = CliRunner().invoke(app, ["reembed", "--user", str(user_id)], env=env)

    assert result.exit_code == 0, result.output
    assert "embedded 5 fact(s) of 1 user(s)" in result.output
    assert "5/5" in result.output  # the progress bar reached the end


@pytest.mark.slow
def test_commands_that_need_no_vector_never_import_the_offline_model(tmp_path: Path) -> None:
    # A fresh interpreter: this test process may have loaded torch already. `status` opens a manager with the
    # offline embedder configured and must not pay for torch (≈ 4 s) nor print a progress bar.
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from memory_plugin.cli import app\n"
        "env = {'MEMORY_EMBEDDING_MODEL': 'local'}\n"
        "result = CliRunner().invoke(app, ['status', '--data-dir', sys.argv[1]], env=env)\n"
        "assert result.exit_code == 0, result.output\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "Loading weights" not in done.stderr


@pytest.mark.slow
async def test_loading_the_offline_model_draws_no_progress_bar(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(model_files, "_st_model", None)  # load it again, as a new process would
    local = local_embedder(runtime="torch")

    vector = await local.embed_query("Ships to Bilbao on Fridays")

    assert len(vector) == 384
    assert "Loading weights" not in capfd.readouterr().err
