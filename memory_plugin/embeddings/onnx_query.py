"""The offline model's transformer under onnxruntime, for one question at a time (the latency of every search).

Why: one question through all-MiniLM-L6-v2 in torch eager mode is ~10.6 ms p50 on one thread, mostly weight
packing of 37 fp32 matrix products; the same graph exported to ONNX and run by onnxruntime (one thread, all
graph optimisations) is ~4.2 ms with identical vectors (min cosine 1.00000, measured on a 2-core machine;
`bench/embedding_latency.py`). int8 quantisation was faster still (3.9 ms) but moved vectors to cosine 0.95
of torch's: stored vectors would no longer be comparable, so it is not used.

The ONNX file is exported from the already-loaded torch model on first use (~1 s) and cached in
`cache_dir` (`MEMORY_DATA_DIR/onnx/` by default), under a name derived from the model's files, the torch
and onnx versions and this module's export recipe, so a new model or exporter never reuses a stale file. It
is written to a temporary file and renamed, so a process never reads a half-written file. Before use, the
session is checked against torch on fixed probe texts (short, longer than the 256-token window, Spanish
with accents); any failure leaves the caller on torch (see `load_query_encoder`).

Only the graph runs here: tokenisation is the model's own (`model.preprocess`, which truncates to
`max_seq_length`), and pooling is the mean over the attention mask, then L2 normalisation, as the model's
`Pooling` and `Normalize` modules compute it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..logs import LOG_PREFIX, logger

__all__ = ["PROBE_TEXTS", "OnnxQueryEncoder", "load_query_encoder", "query_encoder_or_none"]


EXPORT_RECIPE = "bert-last-hidden-state/opset17/torchscript/v1"
"""Part of the cache key: change it whenever `_export` changes what it writes."""

OPSET = 17
MIN_COSINE = 0.9999
"""The ONNX vectors must match torch's at least this closely on every probe, or torch is used."""

PROBE_TEXTS: tuple[str, ...] = (
    "When did Caroline go to the support group?",
    # Longer than the model's 256-token window: exercises truncation and the longest sequence shape.
    " ".join(
        f"Step {i}: the customer asked for {i * 3} flanges in stainless steel, delivered to the Bilbao warehouse."
        for i in range(30)
    ),
    "¿Qué acabado prefiere para las piezas de aluminio? Anodizado negro, según comentó el miércoles en Cádiz.",
)
"""Texts on which a session is checked against torch before it is used."""

_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
_OUTPUT_NAME = "last_hidden_state"
_FILE_PREFIX = "query-encoder-"


@dataclass
class OnnxQueryEncoder:
    """Embeds one question with the ONNX graph of a loaded sentence-transformers model.

    Made by `load_query_encoder`; `encode(text, normalize)` returns what `_encode_one` in `minilm.py`
    returns for the same text (checked on `PROBE_TEXTS` before the encoder is handed out).
    """

    model: Any
    """The `SentenceTransformer` whose tokenizer (`preprocess`) and query prompt are used."""

    session: Any
    """The `onnxruntime.InferenceSession` running the model's transformer."""

    path: Path
    """The cached ONNX file the session was loaded from."""

    input_names: tuple[str, ...]
    """The tokenizer outputs the graph takes (input ids, attention mask, and token types for BERT)."""

    normalizes: bool
    """Whether the model ends with a `Normalize` module (its vectors are unit length whatever the caller asks)."""

    exported: bool = False
    """Whether this load exported the graph (False: the cached file was reused)."""

    export_seconds: float = 0.0
    """Time spent exporting the graph during this load (0 when the cached file was reused)."""

    _prompt: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        self._prompt = (self.model.prompts or {}).get("query", "")

    def encode(self, text: str, normalize: bool) -> list[float]:
        """The embedding of one question (L2-normalised when `normalize` or when the model normalises)."""
        features = self.model.preprocess([self._prompt + text])
        feeds = {name: features[name].numpy() for name in self.input_names}
        (hidden,) = self.session.run([_OUTPUT_NAME], feeds)
        # Mean over the real tokens, as sentence-transformers' Pooling computes it (padding weighs nothing).
        mask = feeds["attention_mask"][..., None].astype(hidden.dtype)
        vector = (hidden * mask).sum(axis=1)[0] / max(float(mask.sum()), 1e-9)
        if normalize or self.normalizes:
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        result: list[float] = vector.astype(np.float64).tolist()
        return result


def load_query_encoder(
    model: Any,
    *,
    model_dir: Path,
    cache_dir: Path,
    reference: Callable[[str], Sequence[float]],
    threads: int = 1,
) -> OnnxQueryEncoder:
    """An `OnnxQueryEncoder` for `model` (a loaded `SentenceTransformer` read from `model_dir`), exporting
    its transformer to `cache_dir` unless a file for the same model, torch and onnx versions is there.

    `reference(text)` is the torch embedding the encoder must reproduce on `PROBE_TEXTS` (cosine ≥ 0.9999).
    A cached file that cannot be loaded or does not match is exported again, once. `threads` is onnxruntime's
    intra-op thread count (0: its default). Raises on any failure (onnxruntime or onnx missing, a model this
    module does not know how to pool, export error, mismatch); `query_encoder_or_none` turns that into a
    warning.
    """
    ort = importlib.import_module("onnxruntime")
    importlib.import_module("onnx")  # torch's exporter serialises through it
    input_names, normalizes = _check_architecture(model)
    path = cache_dir / f"{_FILE_PREFIX}{_cache_key(model_dir)}.onnx"

    def open_checked() -> OnnxQueryEncoder:
        encoder = OnnxQueryEncoder(model, _session(ort, path, threads), path, input_names, normalizes)
        _verify(encoder, reference)
        return encoder

    if path.exists():
        try:
            return open_checked()
        except Exception as exc:
            # INFO: exporting again repairs it; if that fails too, the caller logs the one warning.
            logger.info("%s cached ONNX model %s is unusable (%s); exporting it again", LOG_PREFIX, path, exc)
    started = time.perf_counter()
    _export(model, input_names, path)
    seconds = time.perf_counter() - started
    encoder = open_checked()
    encoder.exported, encoder.export_seconds = True, seconds
    _prune(cache_dir, keep=path)
    return encoder


def query_encoder_or_none(
    model: Any,
    *,
    model_dir: Path,
    cache_dir: Path,
    reference: Callable[[str], Sequence[float]],
    threads: int = 1,
) -> OnnxQueryEncoder | None:
    """`load_query_encoder`, or None with one warning saying why questions stay on torch. Never raises:
    the torch path is always there, only slower."""
    try:
        return load_query_encoder(model, model_dir=model_dir, cache_dir=cache_dir, reference=reference, threads=threads)
    except ImportError as exc:
        logger.warning(
            "%s onnxruntime/onnx not importable (%s): questions are embedded with torch (about 2x slower);"
            " install the [local] extra",
            LOG_PREFIX,
            exc,
        )
    except Exception as exc:
        logger.warning("%s ONNX query embedding unavailable, using torch: %s", LOG_PREFIX, exc)
    return None


def _check_architecture(model: Any) -> tuple[tuple[str, ...], bool]:
    """The graph's inputs and whether the model normalises, for Transformer → mean Pooling [→ Normalize];
    anything else is refused (its pooling is not reproduced here)."""
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ValueError(f"unsupported sentence-transformers pipeline {kinds}")
    pooling = modules[1]
    if getattr(pooling, "pooling_mode", None) != "mean" or not getattr(pooling, "include_prompt", True):
        raise ValueError(f"unsupported pooling {getattr(pooling, 'pooling_mode', None)!r}")
    features = model.preprocess(["probe"])
    names = tuple(name for name in _INPUT_NAMES if name in features)
    if names[:2] != _INPUT_NAMES[:2]:
        raise ValueError(f"the tokenizer gives {sorted(features)}, not input ids and an attention mask")
    return names, kinds[-1] == "Normalize"


_key_lock = threading.Lock()
_key_memo: dict[tuple[str, int, int], str] = {}


def _cache_key(model_dir: Path) -> str:
    """A digest of the model's files (names and bytes), the torch and onnx versions and `EXPORT_RECIPE`."""
    import onnx
    import torch

    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    stamp = (str(model_dir.resolve()), len(files), max((p.stat().st_mtime_ns for p in files), default=0))
    with _key_lock:
        # Hashing ~90 MB costs ~0.2 s: once per process and model directory is enough.
        if stamp not in _key_memo:
            digest = hashlib.sha256()
            for item in (EXPORT_RECIPE, torch.__version__, onnx.__version__):
                digest.update(item.encode() + b"\0")
            for path in files:
                digest.update(path.relative_to(model_dir).as_posix().encode() + b"\0")
                with path.open("rb") as f:
                    digest.update(hashlib.file_digest(f, "sha256").digest())
            _key_memo[stamp] = digest.hexdigest()[:32]
        return _key_memo[stamp]


def _export(model: Any, input_names: tuple[str, ...], path: Path) -> None:
    """Write the transformer's graph (inputs → last hidden state, dynamic batch and sequence) to `path`
    atomically: a temporary file in the same directory, then a rename."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self, transformer: torch.nn.Module) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.transformer(**dict(zip(input_names, inputs, strict=True))).last_hidden_state
            return out

    path.parent.mkdir(parents=True, exist_ok=True)
    features = model.preprocess([PROBE_TEXTS[0]])
    args = tuple(features[name] for name in input_names)
    axes = {name: {0: "batch", 1: "sequence"} for name in (*input_names, _OUTPUT_NAME)}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        # The TorchScript exporter (dynamo=False): measured 1.1 s for MiniLM, with vectors identical to torch's.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes about Python control flow; `_verify` checks the result
            torch.onnx.export(
                LastHiddenState(model[0].auto_model).eval(),
                args,
                tmp,
                input_names=list(input_names),
                output_names=[_OUTPUT_NAME],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
                external_data=False,
            )
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _session(ort: Any, path: Path, threads: int) -> Any:
    options = ort.SessionOptions()
    # One question at a time is latency-bound; on a 2-core machine shared with the database one thread
    # avoids the tail that extra threads cause (see factory.LOCAL_TORCH_THREADS).
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its notes about initializers are not ours to act on
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _verify(encoder: OnnxQueryEncoder, reference: Callable[[str], Sequence[float]]) -> None:
    for text in PROBE_TEXTS:
        got = np.asarray(encoder.encode(text, True))
        want = np.asarray(reference(text), dtype=np.float64)
        cosine = float(got @ want) / max(float(np.linalg.norm(got) * np.linalg.norm(want)), 1e-12)
        if got.shape != want.shape or not cosine >= MIN_COSINE:
            raise ValueError(f"ONNX vectors differ from torch's (cosine {cosine:.6f} on {text[:30]!r}…)")


def _prune(cache_dir: Path, *, keep: Path) -> None:
    """Remove files of older exports (another model or version) and temporary files left by a crash more
    than an hour ago. A process already running on a removed file is unaffected (its session is in memory)."""
    now = time.time()
    for old in cache_dir.glob(_FILE_PREFIX + "*"):
        try:
            stale_tmp = old.suffix == ".tmp" and now - old.stat().st_mtime > 3600
            if old != keep and (old.suffix == ".onnx" or stale_tmp):
                old.unlink()
        except OSError:
            pass  # another process pruned it first, or it is not ours to remove
