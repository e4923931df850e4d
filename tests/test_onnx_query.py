"""The offline model's single-question path on onnxruntime: the same vectors as torch (and as the batch path
that embedded the stored facts), an exported graph cached on disk and reused, and torch whenever onnxruntime
cannot be used, with a warning. Real model, real onnxruntime; each test gets its own cache directory."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_plugin import MemorySettings
from memory_plugin.embeddings import MemoryEmbedder, default_embedder, factory, local_embedder, minilm
from memory_plugin.embeddings.onnx_query import OnnxQueryEncoder, load_query_encoder, query_encoder_or_none

TEXTS = [
    "What outdoor activities does she enjoy?",
    "¿Cuándo llegó el pedido de bridas de acero inoxidable a Cádiz? Pidió añadir los certificados EN 10204.",
    "ok",
    # ~600 tokens: beyond the 256-token window, so truncation must happen exactly where torch's does.
    " ".join(f"Turn {i}: Melanie said the pottery class on Tuesday was great fun for the kids." for i in range(40)),
]


def cosine(a: Any, b: Any) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def torch_vector(model: Any, text: str) -> list[float]:
    return minilm._encode_one(model, text, True)


def load(model: Any, cache_dir: Path) -> OnnxQueryEncoder:
    return load_query_encoder(
        model, model_dir=minilm._model_dir(), cache_dir=cache_dir, reference=lambda t: torch_vector(model, t)
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "memory_plugin" and r.levelno == logging.WARNING]


def runtime_of(embedder: MemoryEmbedder) -> str | None:
    runtime: str | None = getattr(embedder.embedder.model, "query_runtime", None)
    return runtime


@pytest.fixture(scope="module")
def model() -> Any:
    return minilm._load_local()


@pytest.fixture(scope="module")
def exported(model: Any, tmp_path_factory: pytest.TempPathFactory) -> OnnxQueryEncoder:
    """One export for the module's tests that only read it."""
    return load(model, tmp_path_factory.mktemp("onnx-cache"))


@pytest.fixture(autouse=True)
def own_encoders(monkeypatch: pytest.MonkeyPatch) -> None:
    # The offline model keeps one encoder per cache directory for the process; each test starts without any, so
    # that what it observes (an export, a warning) is its own and the sessions are freed after it.
    monkeypatch.setattr(minilm, "_query_encoders", {})


def test_onnx_question_vectors_equal_torch(model: Any, exported: OnnxQueryEncoder) -> None:
    assert exported.exported
    assert exported.export_seconds > 0
    assert len(model.preprocess([TEXTS[-1]])["input_ids"][0]) == model.max_seq_length  # really truncated

    for text in TEXTS:
        onnx_vector = exported.encode(text, True)
        assert len(onnx_vector) == 384
        assert cosine(onnx_vector, torch_vector(model, text)) >= 0.9999, text
        assert max(abs(a - b) for a, b in zip(onnx_vector, torch_vector(model, text), strict=True)) < 1e-4
        assert np.linalg.norm(onnx_vector) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.slow
async def test_questions_match_facts_embedded_in_batches(exported: OnnxQueryEncoder) -> None:
    # Stored facts are embedded by torch in batches; a question with the same words must get the same vector
    # from onnxruntime, or search would not find its own words.
    local = local_embedder(cache_dir=exported.path.parent)
    as_facts = await local.embed_documents(TEXTS)

    for text, as_fact in zip(TEXTS, as_facts, strict=True):
        as_question = await local.embed_query(text)
        assert cosine(as_question, as_fact) >= 1 - 1e-4, text
    assert runtime_of(local) == "onnx"


def test_the_cached_graph_is_reused(model: Any, exported: OnnxQueryEncoder) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in exported.path.parent.iterdir()}

    again = load(model, exported.path.parent)

    assert not again.exported
    assert again.export_seconds == 0
    assert again.path == exported.path
    assert {p.name: p.stat().st_mtime_ns for p in exported.path.parent.iterdir()} == before  # nothing written
    assert again.encode(TEXTS[0], True) == pytest.approx(exported.encode(TEXTS[0], True), abs=1e-6)


@pytest.mark.slow
def test_a_half_written_cache_file_is_exported_again(
    model: Any, exported: OnnxQueryEncoder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / exported.path.name
    broken.write_bytes(exported.path.read_bytes()[: 1 << 20])  # what a crash mid-write would leave

    with caplog.at_level(logging.INFO, logger="memory_plugin"):
        encoder = load(model, tmp_path)

    assert encoder.exported
    assert encoder.path == broken
    assert broken.stat().st_size == exported.path.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == [broken.name]  # no temporary file left behind
    assert any("exporting it again" in r.getMessage() for r in caplog.records)
    for text in TEXTS:
        assert cosine(encoder.encode(text, True), torch_vector(model, text)) >= 0.9999


@pytest.mark.slow
def test_a_graph_that_disagrees_with_torch_is_not_used(
    model: Any, exported: OnnxQueryEncoder, caplog: pytest.LogCaptureFixture
) -> None:
    # Checked against another model's idea of the probes (here: torch on different text), the graph is refused.
    def other(text: str) -> list[float]:
        return torch_vector(model, "The invoice is overdue")

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        encoder = query_encoder_or_none(
            model, model_dir=minilm._model_dir(), cache_dir=exported.path.parent, reference=other
        )

    assert encoder is None
    (warning,) = warnings_of(caplog)  # one warning, though both the cached file and a fresh export were refused
    assert "differ from torch" in warning
    assert "using torch" in warning


async def test_runtime_torch_never_touches_onnxruntime(
    model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # any import of it would now fail, and be logged
    monkeypatch.setitem(sys.modules, "onnx", None)
    local = local_embedder(runtime="torch", cache_dir=tmp_path / "onnx")

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        vector = await local.embed_query(TEXTS[1])

    assert vector == pytest.approx(torch_vector(model, TEXTS[1]), abs=1e-6)
    assert runtime_of(local) == "torch"
    assert warnings_of(caplog) == []
    assert minilm._query_encoders == {}
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize("runtime", ["auto", "onnx"])
async def test_without_onnxruntime_questions_fall_back_to_torch_with_one_warning(
    model: Any, runtime: factory.LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    local = local_embedder(runtime=runtime, cache_dir=tmp_path)

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        first = await local.embed_query(TEXTS[0])
        second = await local.embed_query(TEXTS[1])

    assert first == pytest.approx(torch_vector(model, TEXTS[0]), abs=1e-6)
    assert second == pytest.approx(torch_vector(model, TEXTS[1]), abs=1e-6)
    assert runtime_of(local) == "torch"
    (warning,) = warnings_of(caplog)  # once, not once per question
    assert "onnxruntime" in warning
    assert "torch" in warning


async def test_the_setting_reaches_the_embedder(
    exported: OnnxQueryEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # A cache already holding this model's graph (the file name is the model's key): reused, not exported.
    (tmp_path / "onnx").mkdir()
    shutil.copy(exported.path, tmp_path / "onnx" / exported.path.name)

    default = default_embedder(MemorySettings(data_dir=tmp_path))
    torch_only = default_embedder(MemorySettings(data_dir=tmp_path, local_embedding_runtime="torch"))
    assert default is not None
    assert torch_only is not None
    await default.embed_query(TEXTS[0])
    await torch_only.embed_query(TEXTS[0])

    assert (runtime_of(default), runtime_of(torch_only)) == ("onnx", "torch")
    encoder = minilm._query_encoders[tmp_path / "onnx"]
    assert encoder is not None
    assert not encoder.exported

    monkeypatch.setenv("MEMORY_LOCAL_EMBEDDING_RUNTIME", "torch")
    from_env = local_embedder(cache_dir=tmp_path / "onnx")
    await from_env.embed_query(TEXTS[2])
    assert runtime_of(from_env) == "torch"
    assert MemorySettings().local_embedding_runtime == "torch"
