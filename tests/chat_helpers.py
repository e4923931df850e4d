"""Shared pieces of the chat tests: a word-hashing embedder (texts sharing words get close vectors) and turns."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import unicodedata
from collections.abc import Sequence

from pydantic_ai import Embedder
from pydantic_ai.embeddings import EmbeddingResult, EmbeddingSettings, TestEmbeddingModel
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from memory_plugin.embeddings.embedder import EMBEDDING_DIMENSIONS, MemoryEmbedder


def _vector(text: str) -> list[float]:
    plain = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()
    v = [0.0] * EMBEDDING_DIMENSIONS
    for word in re.findall(r"[a-z]{4,}", plain):
        stem = word[:6]  # "anodizados" and "anodizado" share a dimension
        v[int(hashlib.md5(stem.encode()).hexdigest(), 16) % EMBEDDING_DIMENSIONS] += 1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v] if any(v) else [1.0 / math.sqrt(EMBEDDING_DIMENSIONS)] * EMBEDDING_DIMENSIONS


class WordHashModel(TestEmbeddingModel):
    """A bag of word stems hashed into 384 dimensions: shared words make close vectors."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__("words", dimensions=EMBEDDING_DIMENSIONS)

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        result = await super().embed(inputs, input_type=input_type, settings=settings)
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        return dataclasses.replace(result, embeddings=[_vector(t) for t in texts])


def word_embedder() -> MemoryEmbedder:
    return MemoryEmbedder(Embedder(WordHashModel()), name="words")


def exchange(question: str, answer: str) -> list[ModelMessage]:
    """A user turn and the assistant's reply."""
    return [ModelRequest(parts=[UserPromptPart(question)]), ModelResponse(parts=[TextPart(answer)])]


def tool_exchange(question: str, call_id: str) -> list[ModelMessage]:
    """A user turn, a tool call, its result and the reply: four turns that must stay together after a call."""
    return [
        ModelRequest(parts=[UserPromptPart(question)]),
        ModelResponse(parts=[ToolCallPart("stock", {"item": question}, tool_call_id=call_id)]),
        ModelRequest(parts=[ToolReturnPart("stock", "12 units", tool_call_id=call_id)]),
        ModelResponse(parts=[TextPart("There are 12 units.")]),
    ]
