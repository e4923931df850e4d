"""`MemoryEmbedder`: pydantic-ai's `Embedder` with what the memory needs on top: a fixed dimension, the model's
name as stored beside every vector, batching, and a small cache of query embeddings.

Facts are embedded once, when written, in batches of `batch_size` (one model call per batch); a question is
embedded once per search (an LRU cache answers repeats, e.g. `get_memory_context(query=…)` for the message
that `search` just saw).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from ..errors import EmbeddingError

if TYPE_CHECKING:
    # Types only: importing pydantic-ai costs ~1.1 s, which a process that never embeds (the CLI's `status`)
    # should not pay. The embedder is built on first use (`MemoryEmbedder.embedder`).
    from pydantic_ai import Embedder
    from pydantic_ai.embeddings import EmbeddingModel, EmbeddingSettings

__all__ = ["EMBEDDING_DIMENSIONS", "LOCAL_MODEL_NAME", "OPENAI_MODEL_NAME", "DirectModel", "MemoryEmbedder"]

EMBEDDING_DIMENSIONS = 384
"""The dimension of `memory_search_docs.embedding` (pgvector's HNSW index needs a fixed one)."""

LOCAL_MODEL_NAME = "sentence-transformers:all-MiniLM-L6-v2"
"""The offline model's name, as stored beside its vectors."""
OPENAI_MODEL_NAME = "openai:text-embedding-3-small"
"""OpenAI's model used at 384 dimensions when `OPENAI_API_KEY` is set."""


class DirectModel(Protocol):
    """A model `MemoryEmbedder` calls without pydantic-ai's `Embedder` (the offline model: its first vector
    should not wait for pydantic-ai's import, ~1.3 s)."""

    async def embed(self, texts: Sequence[str], *, input_type: Literal["document", "query"]) -> list[list[float]]:
        """The embeddings of `texts`, in order."""
        ...

    async def embed_query(self, text: str) -> tuple[float, ...]:
        """The embedding of one question, as Python floats (what `embed([text], input_type="query")[0]` gives)."""
        ...


class MemoryEmbedder:
    """Embeds facts and questions for the memory.

    `MemoryEmbedder(Embedder(TestEmbeddingModel(dimensions=384)), name="test")`, or use
    `default_embedder(settings)`.

    Args:
        embedder: The pydantic-ai embedder to call; None with `build`.
        name: The model's name as stored beside each vector (`memory_search_docs.embedding_model`); vectors
            of two names are never compared. Include anything that changes the vectors (model, dimensions).
        batch_size: Texts per model call when embedding facts.
        settings: Embedding settings passed on each call (e.g. `{"dimensions": 384}` for OpenAI).
        query_cache_size: Questions whose embedding is kept (LRU).
        build: Instead of `embedder`, a function that makes it, called on first use (`from_model` passes
            one): building it imports pydantic-ai, which a process that only opens the memory never needs.
        direct: A model that embeds without `Embedder` (with `build`, which wraps the same model for callers of
            `.embedder`): `embed_documents` and `embed_query` call it; `settings` do not apply to it.
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        name: str,
        batch_size: int = 64,
        settings: EmbeddingSettings | None = None,
        query_cache_size: int = 256,
        build: Callable[[], Embedder] | None = None,
        direct: DirectModel | None = None,
    ) -> None:
        if (embedder is None) == (build is None):
            raise TypeError("MemoryEmbedder needs either an embedder or a function that builds one (build=)")
        self._embedder = embedder
        self._build = build
        self._direct = direct
        self.name = name
        self.batch_size = max(1, batch_size)
        self._settings = settings
        self._cache: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._cache_size = query_cache_size
        self.model_calls = 0
        """Calls made to the model (each embeds one batch or one question)."""

    @property
    def embedder(self) -> Embedder:
        """The pydantic-ai embedder, built on first use when given as `build`."""
        if self._embedder is None:
            assert self._build is not None  # one of the two, checked in __init__
            self._embedder = self._build()
        return self._embedder

    @classmethod
    def from_model(cls, model: EmbeddingModel | str, *, name: str | None = None, **kwargs: object) -> MemoryEmbedder:
        """Wrap a pydantic-ai embedding model (or its name, e.g. "openai:text-embedding-3-small"); pydantic-ai's
        `Embedder` around it is built on first use."""
        label = name or (model if isinstance(model, str) else f"{model.system}:{model.model_name}")

        def build() -> Embedder:
            from pydantic_ai import Embedder

            return Embedder(model)

        return cls(name=label, build=build, **kwargs)  # type: ignore[arg-type]

    def _check(self, vectors: Sequence[Sequence[float]], expected: int) -> list[tuple[float, ...]]:
        if len(vectors) != expected:
            raise EmbeddingError(f"{self.name} returned {len(vectors)} embeddings for {expected} texts")
        out = []
        for vector in vectors:
            if len(vector) != EMBEDDING_DIMENSIONS:
                raise EmbeddingError(
                    f"{self.name} returned {len(vector)}-dimensional embeddings; the memory stores"
                    f" {EMBEDDING_DIMENSIONS} (for OpenAI set the `dimensions` setting to {EMBEDDING_DIMENSIONS})"
                )
            out.append(tuple(map(float, vector)))
        return out

    async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Embeddings of `texts`, in order, `batch_size` per model call. Raises `EmbeddingError`."""
        out: list[tuple[float, ...]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            vectors: Sequence[Sequence[float]]
            try:
                if self._direct is not None:
                    vectors = await self._direct.embed(batch, input_type="document")
                else:
                    vectors = (await self.embedder.embed_documents(batch, settings=self._settings)).embeddings
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any provider failure: the caller stores the facts without vectors
                raise EmbeddingError(f"embedding {len(batch)} texts with {self.name} failed: {exc!r}") from exc
            self.model_calls += 1
            out.extend(self._check(vectors, len(batch)))
        return out

    async def embed_query(self, text: str) -> tuple[float, ...]:
        """The embedding of a question (cached). Raises `EmbeddingError`."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        vectors: Sequence[Sequence[float]]
        try:
            if self._direct is not None:
                vectors = [await self._direct.embed_query(text)]
            else:
                vectors = (await self.embedder.embed_query(text, settings=self._settings)).embeddings
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"embedding the query with {self.name} failed: {exc!r}") from exc
        self.model_calls += 1
        (vector,) = self._check(vectors, 1)
        if self._cache_size > 0:
            self._cache[text] = vector
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vector

    def clear_cache(self) -> None:
        """Forget the cached question embeddings: the next `embed_query` of each question asks the model (a
        benchmark that times every search's embedding; a model whose vectors changed)."""
        self._cache.clear()
