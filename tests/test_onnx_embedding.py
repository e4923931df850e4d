"""The offline model on onnxruntime, for facts and questions: the same vectors as sentence-transformers on torch
(alone, in padded batches, past the 256-token window), a fresh process that embeds without importing torch or
pydantic-ai, a graph exported once (announced) and reused, and torch whenever onnxruntime cannot be used, with
one warning. Real model, real onnxruntime; each test gets its own encoders."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_plugin import MemorySettings
from memory_plugin.embeddings import MemoryEmbedder, default_embedder, factory, local, local_embedder, onnx_graph
from memory_plugin.embeddings.onnx_export import export_graph
from memory_plugin.embeddings.onnx_graph import (
    PROBE_META_KEY,
    OnnxEncoder,
    graph_path,
    mapped_graph,
    open_encoder,
    open_session,
    read_pipeline,
)

# Every test here stands on the module's fixtures, which load sentence-transformers (torch) and export the graph:
# ~30 s at load 8 on 2 cores before the first test, so the quick run (`-m "not slow"`) leaves the module out.
pytestmark = pytest.mark.slow

TEXTS = [
    "What outdoor activities does she enjoy?",
    "¿Cuándo llegó el pedido de bridas de acero inoxidable a Cádiz? Pidió añadir los certificados EN 10204.",
    "ok",
    "   leading and trailing spaces, CAPITALS and\ttabs   ",
    # ~600 tokens: beyond the 256-token window, so truncation must happen exactly where torch's does.
    " ".join(f"Turn {i}: Melanie said the pottery class on Tuesday was great fun for the kids." for i in range(40)),
    "Needs 50 brackets machined in 7075 aluminium",
]


def cosines(a: Any, b: Any) -> np.ndarray[Any, Any]:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    result: np.ndarray[Any, Any] = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    return result


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "memory_plugin" and r.levelno == logging.WARNING]


def runtime_of(embedder: MemoryEmbedder) -> str | None:
    runtime: str | None = getattr(embedder.embedder.model, "query_runtime", None)
    return runtime


@pytest.fixture(scope="module")
def model() -> Any:
    return local.load_sentence_transformer()


@pytest.fixture(scope="module")
def cache(model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One export for the module's tests that only read it."""
    cache_dir = tmp_path_factory.mktemp("onnx-cache")
    export_graph(local.model_dir(), cache_dir, load_model=lambda: model)
    return cache_dir


@pytest.fixture
def encoder(cache: Path) -> OnnxEncoder:
    return open_encoder(local.model_dir(), cache)


@pytest.fixture(autouse=True)
def own_encoders(monkeypatch: pytest.MonkeyPatch) -> None:
    # The process keeps one encoder per cache directory; each test starts without any, so that what it observes
    # (an export, a warning) is its own.
    monkeypatch.setattr(local, "_encoders", {})
    monkeypatch.setattr(local, "shared_caches", list)  # only the directories each test names


def test_the_tokens_are_sentence_transformers_tokens(model: Any, encoder: OnnxEncoder) -> None:
    for text in TEXTS:
        ids = encoder._tokenizer.encode(text.strip()).ids
        assert ids == model.preprocess([text])["input_ids"][0].tolist(), text
    assert len(model.preprocess([TEXTS[4]])["input_ids"][0]) == model.max_seq_length == 256  # really truncated


def test_vectors_equal_sentence_transformers_alone_and_in_padded_batches(model: Any, encoder: OnnxEncoder) -> None:
    want = model.encode(TEXTS, normalize_embeddings=True, show_progress_bar=False)
    # 36 texts: more than one 32-text forward pass, lengths from 3 to 256 tokens (padding everywhere).
    many = [f"{t} ({i})" if i >= len(TEXTS) else t for i, t in enumerate(TEXTS * 6)]
    want_many = model.encode(many, normalize_embeddings=True, show_progress_bar=False)

    alone = np.vstack([encoder.encode([t]) for t in TEXTS])
    batched = encoder.encode(TEXTS)
    many_got = encoder.encode(many)

    assert cosines(alone, want).min() >= 0.9999
    assert cosines(batched, want).min() >= 0.9999
    assert cosines(many_got, want_many).min() >= 0.9999
    assert np.abs(batched - want).max() < 1e-4
    assert np.linalg.norm(batched, axis=1) == pytest.approx(np.ones(len(TEXTS)), abs=1e-6)


def test_a_question_alone_gets_bitwise_the_vector_of_the_batch_path(encoder: OnnxEncoder) -> None:
    # `encode_one` (every search's question) skips the batch's sorting, padding and mask arithmetic; the floats
    # must stay those of `encode([text])`, which the stored facts' vectors are compared with. Includes a text cut
    # at 256 tokens, one with surrounding whitespace, an empty one and one of two tokens.
    texts = [*TEXTS, "", "  \t  ", "Was it 2022 or 2023 when Jon's dance studio opened?"]

    for text in texts:
        alone = encoder.encode_one(text)
        assert alone.dtype == np.float32
        assert np.array_equal(alone, encoder.encode([text])[0]), text


async def test_a_searchs_question_is_embedded_off_the_event_loop_with_the_same_floats(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = local_embedder(cache_dir=cache, runtime="onnx")
    model = memory._direct
    assert isinstance(model, local.OfflineMiniLM)
    encoder = local.onnx_encoder(cache)
    assert encoder is not None
    threads: list[str] = []
    encode_one = encoder.encode_one

    def recorded(text: str) -> Any:
        threads.append(threading.current_thread().name)
        return encode_one(text)

    monkeypatch.setattr(encoder, "encode_one", recorded)
    questions = [await memory.embed_query(t) for t in TEXTS]

    # A server's loop keeps serving other requests during the ~6 ms forward pass.
    assert threads
    assert threading.main_thread().name not in threads
    for text, question in zip(TEXTS, questions, strict=True):
        assert type(question) is tuple
        assert len(question) == 384
        assert all(type(x) is float for x in question)
        assert question == tuple((await model.embed([text], input_type="query"))[0])  # bitwise
    assert memory.model_calls == len(TEXTS)


def test_more_threads_wait_without_spinning_and_give_the_same_floats(cache: Path, encoder: OnnxEncoder) -> None:
    # Spinning threads keep a core busy after each question, the core the database then needs.
    two = OnnxEncoder(encoder.pipeline, open_session(mapped_graph(encoder.path), 2), encoder.path)

    assert two.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert encoder.session.get_session_options().intra_op_num_threads == 1
    for text in TEXTS:
        assert np.array_equal(two.encode_one(text), encoder.encode_one(text)), text


async def test_facts_and_questions_both_run_on_onnxruntime(model: Any, cache: Path) -> None:
    # Stored facts and the questions that look for them: the same vectors as torch's, so that search finds its
    # own words, and vectors stored before (by torch) stay comparable.
    memory = local_embedder(cache_dir=cache)
    as_facts = await memory.embed_documents(TEXTS)
    as_questions = [await memory.embed_query(t) for t in TEXTS]

    assert memory._direct is not None
    assert getattr(memory._direct, "last_runtime", None) == "onnx"
    torch_facts = model.encode_document(TEXTS, normalize_embeddings=True, show_progress_bar=False)
    assert cosines(as_facts, torch_facts).min() >= 0.9999
    assert cosines(as_questions, as_facts).min() >= 1 - 1e-5
    assert memory.model_calls == 1 + len(TEXTS)


def test_a_fresh_process_embeds_without_torch_or_pydantic_ai(cache: Path) -> None:
    script = f"""
import asyncio, json, sys
from pathlib import Path
from memory_plugin.embeddings import local_embedder

memory = local_embedder(cache_dir=Path({str(cache)!r}))
facts = asyncio.run(memory.embed_documents(["Ships to Bilbao on Fridays", "Prefers 7075 aluminium"]))
question = asyncio.run(memory.embed_query("Where does it ship?"))
heavy = [m for m in ("torch", "sentence_transformers", "transformers", "pydantic_ai") if m in sys.modules]
sizes = [len(v) for v in facts + [question]]
print(json.dumps({{"heavy": heavy, "runtime": memory._direct.last_runtime, "sizes": sizes}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"heavy": [], "runtime": "onnx", "sizes": [384, 384, 384]}
    assert done.stderr == ""  # no export announced: the graph was cached


def test_the_cached_graph_is_reused_without_writing(cache: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}

    again = local.onnx_encoder(cache)

    assert again is not None
    assert again.path == graph_path(local.model_dir(), cache)
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == before  # nothing written


def test_a_new_data_dir_reads_the_graph_bootstrap_exported(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "shared_caches", lambda: [cache])

    encoder = local.onnx_encoder(tmp_path / "onnx")

    assert encoder is not None
    assert encoder.path.parent == cache
    assert not (tmp_path / "onnx").exists()


def test_another_data_dir_in_the_same_process_reuses_the_loaded_graph(cache: Path, tmp_path: Path) -> None:
    loaded = local.onnx_encoder(cache)

    assert local.onnx_encoder(tmp_path / "onnx") is loaded  # no second export (~10 s with torch's import)
    assert not (tmp_path / "onnx").exists()


@pytest.mark.slow
async def test_the_first_use_without_a_graph_exports_it_once_and_says_so(
    cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        first = await local_embedder(cache_dir=tmp_path).embed_query(TEXTS[0])
        await local_embedder(cache_dir=tmp_path).embed_documents(TEXTS)

    (line,) = warnings_of(caplog)  # the progress line, once
    assert "exporting the offline embedding model to ONNX" in line
    path = graph_path(local.model_dir(), tmp_path)
    assert sorted(os.listdir(tmp_path)) == [path.name, mapped_graph(path).parent.name]
    assert first == pytest.approx(open_encoder(local.model_dir(), cache).encode([TEXTS[0]])[0], abs=1e-6)


@pytest.mark.slow
def test_a_half_written_or_disagreeing_graph_is_exported_again(
    cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import onnx

    path = graph_path(local.model_dir(), tmp_path)
    path.write_bytes(graph_path(local.model_dir(), cache).read_bytes()[: 1 << 20])  # what a crash would leave
    with caplog.at_level(logging.INFO, logger="memory_plugin"):
        repaired = local.onnx_encoder(tmp_path)
    assert repaired is not None
    assert any("is unusable" in r.getMessage() for r in caplog.records)
    # No temporary file left behind: the graph and its mapped copy only.
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, mapped_graph(path).parent.name]

    # A graph whose stored torch vectors it no longer reproduces (another onnxruntime, say) is refused.
    graph = onnx.load(str(path))
    (entry,) = [p for p in graph.metadata_props if p.key == PROBE_META_KEY]
    entry.value = json.dumps((-np.asarray(json.loads(entry.value))).tolist())
    onnx.save(graph, str(path))
    with pytest.raises(ValueError, match="differ from torch"):
        open_encoder(local.model_dir(), tmp_path)


def test_the_graph_runs_from_a_mapped_copy_written_once(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache written before the mapped copy existed: the first open writes it, with the same vectors.
    path = tmp_path / graph_path(local.model_dir(), cache).name
    shutil.copy(graph_path(local.model_dir(), cache), path)
    plain = OnnxEncoder(read_pipeline(local.model_dir()), open_session(path, 1), path).encode(TEXTS)
    opened: list[Path] = []

    def recorded(run: Path, threads: int) -> Any:
        opened.append(run)
        return open_session(run, threads)

    monkeypatch.setattr(onnx_graph, "open_session", recorded)

    first = open_encoder(local.model_dir(), tmp_path)
    mapped = mapped_graph(path)
    assert sorted(p.name for p in mapped.parent.iterdir()) == ["graph.onnx", "source", "weights.bin"]
    assert mapped.stat().st_size < 1 << 20 < (mapped.parent / "weights.bin").stat().st_size  # weights apart
    assert np.abs(first.encode(TEXTS) - plain).max() < 1e-6
    written = {p.name: p.stat().st_mtime_ns for p in mapped.parent.iterdir()}

    again = open_encoder(local.model_dir(), tmp_path)  # what every later process does: nothing written

    assert np.abs(again.encode(TEXTS) - plain).max() < 1e-6
    assert {p.name: p.stat().st_mtime_ns for p in mapped.parent.iterdir()} == written
    assert opened == [mapped, mapped]


def test_a_broken_mapped_copy_is_removed_and_written_again(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / graph_path(local.model_dir(), cache).name
    shutil.copy(graph_path(local.model_dir(), cache), path)
    want = open_encoder(local.model_dir(), tmp_path).encode(TEXTS)
    weights = mapped_graph(path).parent / "weights.bin"
    weights.write_bytes(weights.read_bytes()[: 1 << 20])  # what a disk that filled up would leave

    from_graph = open_encoder(local.model_dir(), tmp_path)  # the graph itself, the broken copy removed
    assert not mapped_graph(path).exists()
    rewritten = open_encoder(local.model_dir(), tmp_path)

    assert np.abs(from_graph.encode(TEXTS) - want).max() < 1e-6
    assert np.abs(rewritten.encode(TEXTS) - want).max() < 1e-6
    assert weights.stat().st_size > 80 << 20


async def test_runtime_torch_never_touches_onnxruntime(
    model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # any import of it would now fail, and be logged
    monkeypatch.setitem(sys.modules, "onnx", None)
    memory = local_embedder(runtime="torch", cache_dir=tmp_path / "onnx")

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        vector = await memory.embed_query(TEXTS[1])
        facts = await memory.embed_documents(TEXTS[:3])

    assert vector == pytest.approx(model.encode_query(TEXTS[1], normalize_embeddings=True).tolist(), abs=1e-6)
    assert cosines(facts, model.encode(TEXTS[:3], normalize_embeddings=True)).min() >= 0.99999
    assert runtime_of(memory) == "torch"
    assert warnings_of(caplog) == []
    assert local._encoders == {}
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize("runtime", ["auto", "onnx"])
async def test_without_onnxruntime_the_model_falls_back_to_torch_with_one_warning(
    model: Any, runtime: factory.LocalRuntime, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    memory = local_embedder(runtime=runtime, cache_dir=cache)

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        first = await memory.embed_query(TEXTS[0])
        facts = await memory.embed_documents(TEXTS[:2])

    assert first == pytest.approx(model.encode_query(TEXTS[0], normalize_embeddings=True).tolist(), abs=1e-6)
    assert len(facts) == 2
    assert runtime_of(memory) == "torch"
    (warning,) = warnings_of(caplog)  # once, not once per call
    assert "onnxruntime" in warning
    assert "torch" in warning


async def test_the_setting_reaches_the_embedder(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # A data directory already holding this model's graph (the file name is the model's key): reused.
    (tmp_path / "onnx").mkdir()
    shutil.copy(graph_path(local.model_dir(), cache), tmp_path / "onnx")

    default = default_embedder(MemorySettings(data_dir=tmp_path))
    torch_only = default_embedder(MemorySettings(data_dir=tmp_path, local_embedding_runtime="torch"))
    assert default is not None
    assert torch_only is not None
    await default.embed_query(TEXTS[0])
    await torch_only.embed_query(TEXTS[0])

    assert (runtime_of(default), runtime_of(torch_only)) == ("onnx", "torch")
    assert local._encoders[tmp_path / "onnx"] is not None

    monkeypatch.setenv("MEMORY_LOCAL_EMBEDDING_RUNTIME", "torch")
    from_env = local_embedder(cache_dir=tmp_path / "onnx")
    await from_env.embed_query(TEXTS[2])
    assert runtime_of(from_env) == "torch"
    assert MemorySettings().local_embedding_runtime == "torch"


async def test_pydantic_ais_embedder_gives_the_same_vectors(cache: Path) -> None:
    memory = local_embedder(cache_dir=cache)

    result = await memory.embedder.embed_documents(TEXTS[:2])

    assert np.asarray(result.embeddings) == pytest.approx(np.asarray(await memory.embed_documents(TEXTS[:2])))
    assert result.provider_name == "sentence-transformers"
