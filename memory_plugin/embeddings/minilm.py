"""The offline MiniLM (`local.OfflineMiniLM`) as a pydantic-ai embedding model, for code that wants it in
pydantic-ai's `Embedder` (`MemoryEmbedder.embedder`). `MemoryEmbedder` itself calls `OfflineMiniLM` directly,
so that a process's first vector does not wait for pydantic-ai's import (~1.3 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType

from .embedder import LOCAL_MODEL_NAME
from .local import OfflineMiniLM

__all__ = ["LocalEmbeddingModel"]


class LocalEmbeddingModel(EmbeddingModel):
    """pydantic-ai's face of `OfflineMiniLM`: vectors are always normalised; `dimensions` (truncation) and a
    device are not supported (the memory stores 384 dimensions, computed on the CPU)."""

    def __init__(self, model: OfflineMiniLM) -> None:
        super().__init__()
        self.local = model

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
        """What embedded the last texts, question or facts (None before the first)."""
        return self.local.last_runtime

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        """Embed with the offline model (see `OfflineMiniLM`)."""
        texts, merged = self.prepare_embed(inputs, settings)
        if merged.get("dimensions"):
            raise ValueError("the offline model gives 384 dimensions; `dimensions` is not supported")
        kind: Literal["document", "query"] = "query" if input_type == "query" else "document"
        return EmbeddingResult(
            embeddings=await self.local.embed(texts, input_type=kind),
            inputs=texts,
            input_type=input_type,
            model_name=self.model_name,
            provider_name=self.system,
        )
