"""`Searcher`: embeds the question once and asks the store for the user's best facts for it: the hybrid score's
best candidates, re-ranked (`rerank.py`; in SQL by `memory_search`, in Python by the stores without SQL). With a
rewrite model (`search.rewrite_model`, off by default) it also searches the model's phrasings of the question
and fuses the lists (`rewrite.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from ..errors import EmbeddingError, InvalidMemoryInputError
from ..logs import LOG_PREFIX, logger
from ..settings import MemorySettings
from ..validation import check_text
from .query import analyze_query
from .rerank import RERANK_WEIGHTS, RERANK_WEIGHTS_SEVERAL, rerank_query
from .rewrite import QueryRewriter, fuse_hits
from .scored import ScoredMemory
from .search import SearchQuery
from .weights import SearchWeights

if TYPE_CHECKING:  # the searcher calls a store and an embedder it is given; retrieval never imports them
    from ..embeddings import MemoryEmbedder
    from ..store import LongTermStore

__all__ = ["SearchStats", "Searcher"]


@dataclass(slots=True)
class SearchStats:
    """Searches run, questions searched by text only because the embedder failed, and the rewrite model's work."""

    searches: int = 0
    embedding_failures: int = 0
    searches_rewritten: int = 0
    """Searches that also searched the rewrite model's phrasings of the question."""
    search_rewrite_failures: int = 0
    """Searches whose rewrite model failed or timed out: the question was searched alone."""


class Searcher:
    """Query-aware retrieval over one store (see `MemoryManager.search`)."""

    def __init__(self, settings: MemorySettings, store: LongTermStore, embedder: MemoryEmbedder | None) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.weights = SearchWeights.from_settings(settings)
        """The hybrid score's weights and limits."""
        self.rerank_weights: Mapping[str, float] = RERANK_WEIGHTS
        """The reranker's weights (`rerank.RERANK_WEIGHTS`; an input left out weighs 0)."""
        self.several_weights: Mapping[str, float] | None = RERANK_WEIGHTS_SEVERAL
        """The reranker's weights for a question that asks for several things (`rerank.asks_for_several`);
        None: `rerank_weights` for every question."""
        self.stats = SearchStats()
        model = settings.search.rewrite_model
        self.rewriter: QueryRewriter | None = (
            QueryRewriter(model, max_chars=min(200, settings.max_search_chars)) if model else None
        )
        """Asks a model for other phrasings of each question (None: the question alone)."""

    async def search(self, user_id: UUID, query: str, *, limit: int = 10) -> list[ScoredMemory]:
        """The user's memories that best answer `query`, best first."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidMemoryInputError("search query must be a non-empty string")
        check_text(query, "search query", self.settings.max_search_chars)
        if not 1 <= limit <= 1000:
            raise InvalidMemoryInputError(f"limit must be between 1 and 1000, got {limit}")
        self.stats.searches += 1
        if self.rewriter is None:
            return await self._search_one(user_id, query, limit, await self._embed(query))
        # The question's own search runs while the model thinks: the model's latency is the search's extra cost.
        rewriting = asyncio.ensure_future(self.rewriter.rewrite(query))
        try:
            original = await self._search_one(user_id, query, limit, await self._embed(query))
        except BaseException:
            rewriting.cancel()
            raise
        rewrites = await rewriting
        if rewrites is None:
            self.stats.search_rewrite_failures += 1
        if not rewrites:
            return original
        self.stats.searches_rewritten += 1
        # One embedding per phrasing, side by side (`MemoryEmbedder` batches documents, not questions).
        embeddings = await asyncio.gather(*(self._embed(text) for text in rewrites))
        pairs = zip(rewrites, embeddings, strict=True)
        others = await asyncio.gather(*(self._search_one(user_id, text, limit, vector) for text, vector in pairs))
        return fuse_hits([original, *others], limit)

    async def _embed(self, text: str) -> tuple[float, ...] | None:
        """The question's embedding; None without an embedder or when it fails (counted, logged)."""
        if self.embedder is None:
            return None
        try:
            return await self.embedder.embed_query(text)
        except EmbeddingError as exc:
            self.stats.embedding_failures += 1
            logger.warning("%s searching by text only: %s", LOG_PREFIX, exc)
            return None

    async def _search_one(
        self, user_id: UUID, query: str, limit: int, vector: tuple[float, ...] | None
    ) -> list[ScoredMemory]:
        """The store's best `limit` for one question, by its text and `vector` (None: text only)."""
        # The store reranks the hybrid order's best rerank_candidates (in SQL for Postgres) and returns `limit`.
        pool = self.weights.rerank_candidates
        return await self.store.search(
            user_id,
            SearchQuery(
                text=query,
                limit=limit,
                embedding=vector,
                model=self.embedder.name if self.embedder is not None and vector is not None else None,
                weights=self.weights,
                analysis=analyze_query(query),
                rerank=rerank_query(query, pool, self.rerank_weights, self.several_weights) if pool else None,
            ),
        )
