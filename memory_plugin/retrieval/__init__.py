"""Query-aware retrieval: which memories answer *this* message.

- `query.py`: dates, months and "when" in a question (pure);
- `weights.py`: the weights of the hybrid score, with the measurements that chose them;
- `scored.py`: `ScoredMemory`, a hit with the parts of its score;
- `search.py`: `SearchQuery` (what a store receives) and the Python ranking of the stores without SQL;
- `rerank.py`: the second stage, the hybrid score's best 100 re-ranked by how they cluster (pure);
- `searcher.py`: embeds the question and asks the store for the reranked best;
- `rewrite.py`: the optional LLM rewrite of the question (`search.rewrite_model`, off by default) and the fusion
  of the lists its phrasings find.

Both stages run in SQL, in one round trip (`public.memory_search` in `supabase/schemas/22_memory_search.sql`),
and in Python for the stores without SQL (`score_in_python`, `rerank.rerank_hits`).
"""

from .query import DateWindow, QueryAnalysis, analyze_query
from .scored import ScoreComponents, ScoredMemory
from .search import BacklogItem, EmbeddingUpdate, SearchQuery, record_from_json, score_in_python
from .weights import SearchWeights

__all__ = [
    "BacklogItem",
    "DateWindow",
    "EmbeddingUpdate",
    "QueryAnalysis",
    "ScoreComponents",
    "ScoredMemory",
    "SearchQuery",
    "SearchWeights",
    "analyze_query",
    "record_from_json",
    "score_in_python",
]
