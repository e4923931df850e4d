"""The offline model on onnxruntime, without torch: tokenizer (the `tokenizers` library, from the model's own
`tokenizer.json`), the exported transformer graph, mean pooling and L2 normalisation, for batches and single
questions alike.

Why: importing torch and sentence-transformers costs ~4 s on an idle 2-core machine (10–65 s under load), which
every fresh process paid before its first vector. This path imports onnxruntime, tokenizers and numpy (~0.5 s)
and loads the cached graph (~0.2 s). One question is ~4 ms instead of torch's ~10 ms (one thread; see
`bench/embedding_latency.py`), and the vectors are torch's (cosine ≥ 0.9999, checked when the graph is exported
and, against the vectors stored in the graph, each time it is opened). int8 quantisation was faster still but
moved vectors to cosine 0.95 of the stored ones, so it is not used.

The graph is written once by `onnx_export.py` (which needs torch): at bootstrap, or on the first use in a
process that finds no graph. It lives in `cache_dir` (`MEMORY_DATA_DIR/onnx/`) under a name derived from the
model's files and `EXPORT_RECIPE`, so another model or exporter never reuses a stale file. Beside it, a copy
with the weights in a file of their own (`mapped_graph`), written once by onnxruntime alone: onnxruntime maps
those weights instead of parsing them out of one 90 MB protobuf, so a fresh process opens the graph in ~0.06 s
of CPU instead of ~0.19 s (a third of its whole cold start; measured on a 2-core machine).

What sentence-transformers does is reproduced here and checked by the export: texts are stripped, tokenised
with truncation at the model's `max_seq_length` (256 for MiniLM), padded per batch; the pooling is the mean of
the last hidden state over the attention mask (padding weighs nothing); then `Normalize`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BATCH",
    "EXPORT_RECIPE",
    "MAPPED_SUFFIX",
    "MIN_COSINE",
    "PROBE_TEXTS",
    "QUICK_PROBES",
    "OnnxEncoder",
    "Pipeline",
    "check_against",
    "graph_path",
    "mapped_graph",
    "open_encoder",
    "open_session",
    "read_pipeline",
    "write_mapped_graph",
]

EXPORT_RECIPE = "bert-last-hidden-state/opset17/torchscript/v2+probes"
"""Part of the cache key: change it whenever `onnx_export` changes what it writes."""

MIN_COSINE = 0.9999
"""The ONNX vectors must match torch's at least this closely on every probe, or the graph is not used."""

BATCH = 32
"""Texts per forward pass, sorted by length first (what sentence-transformers' `encode` does): padding to the
longest of 32 similar lengths wastes little."""

PROBE_META_KEY = "memory_plugin.probe_vectors"
"""The graph's metadata entry holding torch's vectors of `PROBE_TEXTS` (JSON), checked when it is opened."""

FILE_PREFIX = "minilm-"

PROBE_TEXTS: tuple[str, ...] = (
    "When did Caroline go to the support group?",
    # Longer than the model's 256-token window: exercises truncation and the longest sequence shape.
    " ".join(
        f"Step {i}: the customer asked for {i * 3} flanges in stainless steel, delivered to the Bilbao warehouse."
        for i in range(30)
    ),
    "¿Qué acabado prefiere para las piezas de aluminio? Anodizado negro, según comentó el miércoles en Cádiz.",
    "  ok  ",
)
"""Texts on which the graph is checked against torch, alone and as one padded batch."""


@dataclass(frozen=True, slots=True)
class Pipeline:
    """What the model's sentence-transformers configuration says, for the part this module reproduces."""

    model_dir: Path
    max_seq_length: int
    lower_case: bool
    normalizes: bool


def read_pipeline(model_dir: Path) -> Pipeline:
    """The model's pipeline from its JSON files; `ValueError` unless it is Transformer → mean Pooling
    [→ Normalize] without prompts (any other pooling is not reproduced here)."""
    modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
    kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ValueError(f"unsupported sentence-transformers pipeline {kinds}")
    pooling = json.loads((model_dir / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True)
    if modes != ["pooling_mode_mean_tokens"] or not pooling.get("include_prompt", True):
        raise ValueError(f"unsupported pooling {modes}")
    st_config = model_dir / "config_sentence_transformers.json"
    prompts = json.loads(st_config.read_text(encoding="utf-8")).get("prompts") if st_config.exists() else None
    if any(prompts.values() if isinstance(prompts, dict) else ()):
        raise ValueError("models with prompts are not supported on onnxruntime")
    bert = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
    return Pipeline(
        model_dir=model_dir,
        max_seq_length=int(bert["max_seq_length"]),
        lower_case=bool(bert.get("do_lower_case", False)),
        normalizes=kinds[-1] == "Normalize",
    )


def graph_path(model_dir: Path, cache_dir: Path) -> Path:
    """Where the graph of the model in `model_dir` is cached: a digest of `EXPORT_RECIPE` and, per file of the
    model, its name, size and the first and last MiB of its bytes (2 ms where hashing all 90 MB took 0.2 s;
    no two releases of a model share all of these)."""
    digest = hashlib.sha256(EXPORT_RECIPE.encode() + b"\0")
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(model_dir).as_posix()}\0{size}\0".encode())
        with path.open("rb") as f:
            digest.update(f.read(1 << 20))
            if size > 2 << 20:
                f.seek(-(1 << 20), 2)
                digest.update(f.read())
    return cache_dir / f"{FILE_PREFIX}{digest.hexdigest()[:32]}.onnx"


class OnnxEncoder:
    """Embeds texts with the exported graph: `encode(texts)` returns one row per text, in order, L2-normalised
    when the model normalises (MiniLM does) or `normalize` is asked; `encode_one(text)`, a search's question,
    the same normalised row with ~0.1 ms less work around the model."""

    def __init__(self, pipeline: Pipeline, session: Any, path: Path) -> None:
        from tokenizers import Tokenizer

        self.pipeline = pipeline
        self.session = session
        """The `onnxruntime.InferenceSession` running the transformer (inputs → last hidden state)."""
        self.path = path
        """The cached graph the session runs (its weights mapped from `mapped_graph(path)` when that exists)."""
        self.input_names = tuple(i.name for i in session.get_inputs())
        tokenizer = Tokenizer.from_file(str(pipeline.model_dir / "tokenizer.json"))
        self._pad_id = int((tokenizer.padding or {}).get("pad_id") or tokenizer.token_to_id("[PAD]") or 0)
        # tokenizer.json carries its own truncation (128) and fixed padding: the model's window decides, and
        # padding is done per batch in `encode`.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=pipeline.max_seq_length)
        self._tokenizer = tokenizer

    def encode(self, texts: Sequence[str], *, normalize: bool = True) -> np.ndarray[Any, np.dtype[np.float32]]:
        """The embeddings of `texts` (shape `len(texts)` × 384), in `BATCH`es of similar length."""
        cleaned = [t.strip() for t in texts]
        if self.pipeline.lower_case:
            cleaned = [t.lower() for t in cleaned]
        encodings = self._tokenizer.encode_batch(cleaned)
        out = np.zeros((len(texts), 0), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            vectors = self._forward([encodings[i] for i in chunk])
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[chunk] = vectors
        if normalize or self.pipeline.normalizes:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.maximum(norms, 1e-12)
        return out

    def encode_one(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        """The embedding of one text (a search question), bitwise `encode([text])[0]`: the same graph on the same
        tokens, the same float32 arithmetic, without what only a batch needs (sorting, padding, the mask's
        weights: one unpadded sequence attends to all its tokens) and with a single tokenizer call."""
        cleaned = text.strip()
        if self.pipeline.lower_case:
            cleaned = cleaned.lower()
        encoding = self._tokenizer.encode(cleaned)
        ids = np.array([encoding.ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([encoding.type_ids], dtype=np.int64),
        }
        (hidden,) = self.session.run(None, {name: feeds[name] for name in self.input_names})
        # `_forward`'s mean for a mask of ones: multiplying by 1.0 is exact and the sum runs in the same order.
        pooled = hidden.sum(axis=1) / np.float32(ids.shape[1])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)  # as `encode`: on a row, not a 1-D vector's dot
        vector: np.ndarray[Any, np.dtype[np.float32]] = (pooled / np.maximum(norms, 1e-12))[0]
        return vector

    def _forward(self, encodings: Sequence[Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = e.ids, e.attention_mask, e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        (hidden,) = self.session.run(None, {name: feeds[name] for name in self.input_names})
        weights = mask[..., None].astype(hidden.dtype)
        pooled: np.ndarray[Any, np.dtype[np.float32]] = (hidden * weights).sum(axis=1) / np.maximum(
            weights.sum(axis=1), 1e-9
        )
        return pooled


def open_session(path: Path, threads: int, *, optimize_to: Path | None = None) -> Any:
    """An onnxruntime session on `path`, on `threads` intra-op threads (0: onnxruntime's default).

    With `optimize_to`, the graph is optimised (onnxruntime's extended fusions: attention, layer norm, GELU)
    and the result written there; without, it is run as it is. The export writes the optimised graph once, so
    that opening it takes ~0.2 s instead of ~0.5 s, with the same speed (measured on a 2-core machine)."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    # Latency-bound: on a 2-core machine shared with the database one thread avoids the tail that extra
    # threads cause (see `local.LOCAL_THREADS`).
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if threads != 1:
        # More threads (`MEMORY_LOCAL_EMBEDDING_THREADS`) wait without spinning: spinning ones keep burning a
        # core the database needs. 2 threads beside PostgreSQL: p95 12-29 ms and 7.3-11 ms of CPU per question
        # without spinning, 14-61 ms and 13 ms with; the same floats either way.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if optimize_to is None:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    else:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(optimize_to)
    options.log_severity_level = 3  # errors only: its notes about initializers are not ours to act on
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def check_against(encoder: OnnxEncoder, reference: np.ndarray[Any, Any], probes: Sequence[int]) -> None:
    """`ValueError` unless `encoder` gives `reference` (torch's vectors of `PROBE_TEXTS`) on the probes numbered
    `probes`, each alone (`encode_one`, a search question's path) and all as one padded batch (`encode`)."""
    texts = [PROBE_TEXTS[i] for i in probes]
    want = reference[list(probes)]
    alone = np.vstack([encoder.encode_one(text) for text in texts])
    for got in (alone, encoder.encode(texts)):
        cosines = (got * want).sum(axis=1) / np.maximum(
            np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1), 1e-12
        )
        if got.shape != want.shape or not float(cosines.min()) >= MIN_COSINE:
            raise ValueError(f"ONNX vectors differ from torch's (min cosine {float(cosines.min()):.6f})")


QUICK_PROBES = (0, 3)
"""The probes checked each time a graph is opened (~15 ms; the export checks all of them, incl. the 256-token
one that takes ~0.2 s): a graph that onnxruntime now runs differently fails on any text."""


MAPPED_SUFFIX = ".mapped"
"""`mapped_graph(path)` is in the directory `<path>.mapped/`: `graph.onnx`, its weights `weights.bin`, and
`source`, the size and modification time of the graph it was made from."""


def mapped_graph(path: Path) -> Path:
    """Where the copy of the graph cached at `path` with its weights in a file of their own lives (see the module
    docstring): the same graph, the same vectors, opened in a third of the CPU time."""
    return path.with_name(path.name + MAPPED_SUFFIX) / "graph.onnx"


def _stamp(path: Path) -> str:
    status = path.stat()
    return f"{status.st_size} {status.st_mtime_ns}\n"


def write_mapped_graph(path: Path) -> Path:
    """Write `mapped_graph(path)` from the graph at `path`, with onnxruntime only (~0.4 s of CPU, once), unless
    it is there and was made from this very file (its size and modification time are kept beside it, so a graph
    exported or changed again gets a new copy); returns it. Written into a temporary directory renamed into
    place, so a process never maps a half-written file; when another process renames its copy first, that one
    is kept. `OSError` when the directory is not writable."""
    import onnxruntime as ort

    target = mapped_graph(path)
    stamp = _stamp(path)
    try:
        if (target.parent / "source").read_text() == stamp and target.exists():
            return target
    except OSError:
        pass  # no copy yet
    building = Path(tempfile.mkdtemp(prefix=target.parent.name + ".", suffix=".tmp", dir=path.parent))
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # a copy, not a rewrite
        options.optimized_model_filepath = str(building / target.name)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        options.log_severity_level = 3
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        (building / "source").write_text(stamp)
        shutil.rmtree(target.parent, ignore_errors=True)  # a copy of an earlier graph at this path
        try:
            os.rename(building, target.parent)
        except OSError:
            if not target.exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def open_encoder(model_dir: Path, cache_dir: Path, *, threads: int = 1) -> OnnxEncoder:
    """The encoder of the graph cached for `model_dir` in `cache_dir`. `FileNotFoundError` when it was never
    exported; `ValueError` when its vectors no longer match the torch vectors stored in it at export time (say,
    another onnxruntime); `ImportError` without onnxruntime or tokenizers.

    It runs the graph's mapped copy (`mapped_graph`), written now if missing; the graph itself when the copy
    cannot be written (a read-only cache) or is unusable (then the copy is removed, to be written again)."""
    pipeline = read_pipeline(model_dir)
    path = graph_path(model_dir, cache_dir)
    if not path.exists():
        raise FileNotFoundError(path)
    try:
        return _checked_encoder(pipeline, path, write_mapped_graph(path), threads)
    except ImportError:
        raise
    except Exception:
        shutil.rmtree(mapped_graph(path).parent, ignore_errors=True)
    return _checked_encoder(pipeline, path, path, threads)


def _checked_encoder(pipeline: Pipeline, path: Path, run: Path, threads: int) -> OnnxEncoder:
    session = open_session(run, threads)
    stored = session.get_modelmeta().custom_metadata_map.get(PROBE_META_KEY)
    if stored is None:
        raise ValueError(f"{run} holds no reference vectors")
    encoder = OnnxEncoder(pipeline, session, path)
    check_against(encoder, np.asarray(json.loads(stored), dtype=np.float32), QUICK_PROBES)
    return encoder
