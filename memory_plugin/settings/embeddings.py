"""Which model embeds facts and questions, and what runs it (`settings.embeddings`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .flat import Flat, SettingsGroup

__all__ = ["EmbeddingNames", "EmbeddingSettings", "LocalRuntime"]

LocalRuntime = Literal["auto", "onnx", "torch"]
"""What runs the offline embedding model (`settings.embeddings.local_runtime`)."""


class EmbeddingSettings(SettingsGroup):
    """The embedding model of facts and questions (`settings.embeddings`)."""

    model: str | None = "auto"
    """Embeddings of facts and questions: `auto` (OpenAI `text-embedding-3-small` at 384 dimensions when
    `OPENAI_API_KEY` is set, else the offline all-MiniLM-L6-v2 of the `[local]` extra, else none), `local`,
    `none` (text-only search), or any pydantic-ai embedding model name (asked for 384 dimensions). Changing it
    leaves older facts without a vector of the new model until `memory-plugin reembed`."""

    batch_size: int = Field(default=64, ge=1)
    """Facts embedded per model call at write time and by `reembed`."""

    local_runtime: LocalRuntime = "auto"
    """What runs the offline model (`local`), for facts and questions: `auto` and `onnx` (onnxruntime; torch, with
    one warning, when it cannot be used), `torch`. onnxruntime gives the same vectors (checked against torch
    when its graph is exported), a question in ~4 ms instead of ~10, and a new process's first vector without
    torch's import (~4 s); the graph is exported once (bootstrap, or the first use) and cached in
    `data_dir/onnx/`. Env `MEMORY_LOCAL_EMBEDDING_RUNTIME`."""


class EmbeddingNames:
    """The flat names (and `MEMORY_*` variables) of `EmbeddingSettings`' fields."""

    embedding_model = Flat[str | None]("embeddings.model")
    embedding_batch_size = Flat[int]("embeddings.batch_size")
    local_embedding_runtime = Flat[LocalRuntime]("embeddings.local_runtime")
