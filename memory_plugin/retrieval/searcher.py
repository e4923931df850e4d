"""`Searcher`: embeds the question once and asks the store for the user's best facts for it: the hybrid score's
best candidates, re-ranked (`rerank.py`; in SQL by `memory_search`, in Python by the stores without SQL)."""

from __future__ import annotations

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
from .scored import ScoredMemory
from .search import SearchQuery
from .weights import SearchWeights

if TYPE_CHECKING:  # the searcher calls a store and an embedder it is given; retrieval never imports them
    from ..embeddings import MemoryEmbedder
    from ..store import LongTermStore

__all__ = ["SearchStats", "Searcher"]


@dataclass(slots=True)
class SearchStats:
    """Searches run, and questions searched by text only because the embedder failed."""

    searches: int = 0
    embedding_failures: int = 0


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

    async def search(self, user_id: UUID, query: str, *, limit: int = 10) -> list[ScoredMemory]:
        """The user's memories that best answer `query`, best first."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidMemoryInputError("search query must be a non-empty string")
        check_text(query, "search query", self.settings.max_search_chars)
        if not 1 <= limit <= 1000:
            raise InvalidMemoryInputError(f"limit must be between 1 and 1000, got {limit}")
        embedding: tuple[float, ...] | None = None
        if self.embedder is not None:
            try:
                embedding = await self.embedder.embed_query(query)
            except EmbeddingError as exc:
                self.stats.embedding_failures += 1
                logger.warning("%s searching by text only: %s", LOG_PREFIX, exc)
        self.stats.searches += 1
        # The store reranks the hybrid order's best rerank_candidates (in SQL for Postgres) and returns `limit`.
        pool = self.weights.rerank_candidates
        return await self.store.search(
            user_id,
            SearchQuery(
                text=query,
                limit=limit,
                embedding=embedding,
                model=self.embedder.name if self.embedder is not None and embedding is not None else None,
                weights=self.weights,
                analysis=analyze_query(query),
                rerank=rerank_query(query, pool, self.rerank_weights, self.several_weights) if pool else None,
            ),
        )
