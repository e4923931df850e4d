"""`QueryRewriter`: a language model's alternative phrasings of a search question, and `fuse_hits`, which merges
the searches of the question and its phrasings into one list.

A question often shares few words with the fact that answers it ("What does Caroline do to relax?" against
"Caroline: I went hiking with my kids last weekend"), and multi-hop or open-domain questions name none of the
fact's words at all. A model can say what to look for instead ("Caroline hobbies", "Caroline outdoor
activities"). Off unless `search.rewrite_model` names a model: each search then costs one model call.

Bounded so that the search never depends on the model: at most `max_rewrites` phrasings of at most
`max_chars` characters each, empty ones, repeats and copies of the question dropped; a model that fails or
times out leaves the question alone (counted in `MemoryManager.stats.search_rewrite_failures`, logged once,
later ones at debug level). The question goes to the model with sensitive data (card numbers, keys) masked, as
the extractor's messages do. The same question gets the same phrasings (temperature 0 and an LRU cache), so the
search the context reader runs for a message that `search` just saw costs no second call.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import BaseModel, Field

from ..logs import LOG_PREFIX, logger
from ..privacy import redact_sensitive
from ..text import normalize_key, unstorable_reason
from .scored import ScoredMemory

if TYPE_CHECKING:
    # Types only: importing pydantic-ai costs ~1.1 s, which a process that never rewrites should not pay.
    from pydantic_ai import Agent
    from pydantic_ai.models import Model

__all__ = [
    "QUESTION_WEIGHT",
    "REWRITE_INSTRUCTIONS",
    "RRF_K",
    "QueryRewriter",
    "RewriteOutput",
    "RewriteStats",
    "clean_rewrites",
    "fuse_hits",
]

REWRITE_INSTRUCTIONS = """\
You help a memory search engine find the past conversation turns that answer a question about people's lives.
The search matches words and meaning. Write up to {n} short alternative search queries (3 to 12 words each)
that would find the turns holding the answer: name the likely words of the answer, the people, things, places
and events involved; split a question that needs several facts into one query per fact. Keep the people's
names. Do not answer the question, do not repeat it, do not invent details that are not implied."""
"""The model's instructions (`{n}`: the most phrasings wanted); fixed, so that the same question is asked alike."""

RRF_K = 5
"""Reciprocal rank fusion's constant: a hit at rank r of a phrasing's list adds 1 / (RRF_K + r), of the question's
list `QUESTION_WEIGHT` / (RRF_K + r). Not the usual 60 (Cormack, Clarke and Büttcher, SIGIR 2009, for deep TREC
lists of different documents): here every list is drawn from the same few hundred turns, so with 60 the weights
of ranks 1 to 50 differ by less than 2× and a turn's number of lists decides, not its ranks. Measured on LoCoMo's
development split with two deliberately weak offline phrasings per question (the question's content words, and
its names alone; a stand-in for a model, see docs/retrieval.md): recall@10 over categories 1–4 0.798 for the
question alone, 0.531 fused with k = 60 and equal weights, 0.769 with k = 10, 0.792 with k = 5 and the question
weighing 2."""

QUESTION_WEIGHT = 2.0
"""The question's own list counts twice a phrasing's: its first 7 hits stay ahead of any phrasing's first
(2 / (5 + 7) = 1 / (5 + 1), the tie going to the question), while each phrasing's best can still enter a top 10."""

_MIN_CHARS = 3
"""Shorter phrasings are dropped: they hold no word to search for (pydantic-ai's `TestModel` answers "a")."""


class RewriteOutput(BaseModel):
    """The model's structured answer."""

    queries: list[str] = Field(default_factory=list)
    """Alternative search queries for the question, best first."""


@dataclass(slots=True)
class RewriteStats:
    """What the rewriter did since it was made."""

    calls: int = 0
    """Questions sent to the model (a cached question is not sent again). Its failures are counted by the search
    that asked (`SearchStats.search_rewrite_failures`, in `MemoryManager.stats`)."""


class QueryRewriter:
    """Asks a pydantic-ai model for other ways to search a question (`rewrite`); never raises for the model.

    `QueryRewriter("openai:gpt-4o-mini")`, or in tests `QueryRewriter(FunctionModel(...))`. The agent is built on
    first use (so an unusable model name is a counted failure of the first search, not of opening the memory).

    Args:
        model: A pydantic-ai model, or a model name such as "openai:gpt-4o-mini".
        max_rewrites: The most phrasings kept (and asked for).
        timeout: Seconds the model may take; after it the question is searched alone.
        max_chars: The longest phrasing kept (longer ones are cut at a word boundary).
        cache_size: Questions whose phrasings are kept (LRU; 0: none).
    """

    def __init__(
        self,
        model: Model | str,
        *,
        max_rewrites: int = 3,
        timeout: float = 10.0,
        max_chars: int = 200,
        cache_size: int = 256,
    ) -> None:
        self.model = model
        self.max_rewrites = max_rewrites
        self.timeout = timeout
        self.max_chars = max_chars
        self.stats = RewriteStats()
        self._cache_size = cache_size
        self._cache: OrderedDict[str, list[str]] = OrderedDict()
        self._agent: Agent[None, RewriteOutput] | None = None
        self._warned = False

    @property
    def label(self) -> str:
        """The model's name, for logs and benchmark tables."""
        return self.model if isinstance(self.model, str) else self.model.model_id

    def clear_cache(self) -> None:
        """Forget the cached phrasings (a benchmark that times the model call empties it first)."""
        self._cache.clear()

    def _get_agent(self) -> Agent[None, RewriteOutput]:
        if self._agent is None:
            from pydantic_ai import Agent
            from pydantic_ai.settings import ModelSettings

            self._agent = Agent(
                self.model,
                output_type=RewriteOutput,
                instructions=REWRITE_INSTRUCTIONS.format(n=self.max_rewrites),
                model_settings=ModelSettings(temperature=0.0),  # the same question, the same phrasings
                retries=1,
                name="memory-query-rewriter",
            )
        return self._agent

    async def ask(self, question: str) -> list[str]:
        """The model's phrasings of `question`, cleaned (`clean_rewrites`). Raises whatever the model raises
        (a missing key, a connection error, `TimeoutError`): for a caller that must know, like a benchmark."""
        cached = self._cache.get(question)
        if cached is not None:
            self._cache.move_to_end(question)
            return list(cached)
        self.stats.calls += 1
        prompt = f"Question: {' '.join(redact_sensitive(question).text.split())}"
        result = await asyncio.wait_for(self._get_agent().run(prompt), self.timeout)
        rewrites = clean_rewrites(question, result.output.queries, self.max_rewrites, self.max_chars)
        if self._cache_size > 0:
            self._cache[question] = rewrites
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return list(rewrites)

    async def rewrite(self, question: str) -> list[str] | None:
        """The phrasings of `question` (perhaps none); None when the model failed (logged once, later failures at
        debug level; the caller counts them)."""
        try:
            return await self.ask(question)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any model failure (also building the agent): the question is searched alone
            if not self._warned:
                self._warned = True
                logger.warning(
                    "%s the search rewrite model %r failed (%r); searching the question alone (later failures are"
                    " counted in MemoryManager.stats.search_rewrite_failures and logged at debug level)",
                    LOG_PREFIX,
                    self.label,
                    exc,
                )
            else:
                logger.debug("%s search rewrite model %r failed: %r", LOG_PREFIX, self.label, exc)
            return None


def clean_rewrites(question: str, queries: Sequence[Any], max_rewrites: int, max_chars: int) -> list[str]:
    """At most `max_rewrites` of `queries`, each on one line and at most `max_chars` long; non-strings, short or
    unstorable ones, repeats and the question itself (ignoring case, accents and punctuation) dropped."""
    seen = {normalize_key(question)}
    out: list[str] = []
    for query in queries:
        if len(out) >= max_rewrites:
            break
        if not isinstance(query, str):
            continue
        text = " ".join(query.split())
        if len(text) > max_chars:
            text = text[:max_chars].rsplit(" ", 1)[0]
        key = normalize_key(text)
        if len(key) < _MIN_CHARS or key in seen or unstorable_reason(text):
            continue
        seen.add(key)
        out.append(text)
    return out


def fuse_hits(lists: Sequence[Sequence[ScoredMemory]], limit: int) -> list[ScoredMemory]:
    """One list of the best `limit` from the searches of the question (`lists[0]`) and its phrasings, by weighted
    reciprocal rank fusion: each memory scores the sum over the lists that hold it of w / (`RRF_K` + its rank), w
    `QUESTION_WEIGHT` for the question's list and 1 for a phrasing's.

    Ranks, not scores: the reranker's score is mostly relative to its own search's best candidate (the hybrid
    score over the best one's, the rank weight, full text normalised by the best match), so the top hit of a
    weak phrasing scores about as high as the top hit of the question (best-score fusion: recall@10 0.703 against
    0.798 for the question alone with the weak phrasings of `RRF_K`'s measurement). The question weighs more
    because a phrasing can drift from it; a memory several lists rank high still rises. Ties go to the earlier
    list (the question's own first), then to the better rank in it.

    Each hit is the one of the list that ranked it best (its `components`, `previous_id` and `hybrid` are that
    search's), with `score` the fused score: the returned list is best first by `score`.
    """
    best: dict[UUID, tuple[int, ScoredMemory]] = {}  # id -> (its best rank in any list, that list's hit)
    first: dict[UUID, tuple[int, int]] = {}  # id -> (list index, rank) of the earliest list that holds it
    fused: dict[UUID, float] = {}
    for index, hits in enumerate(lists):
        weight = QUESTION_WEIGHT if index == 0 else 1.0
        for rank, hit in enumerate(hits, start=1):
            key = hit.memory.id
            fused[key] = fused.get(key, 0.0) + weight / (RRF_K + rank)
            first.setdefault(key, (index, rank))
            if key not in best or rank < best[key][0]:
                best[key] = (rank, hit)
    order = sorted(fused, key=lambda key: (-fused[key], first[key]))[:limit]
    return [replace(best[key][1], score=fused[key]) for key in order]
