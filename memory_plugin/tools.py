"""Memory tools a model can call: search my memory, remember this, forget this.

Each tool acts only on the memory of the user in the run's deps, never on a user id the model supplies.

A tool refuses bad arguments with a plain answer the model can read ("No such item", "Not stored: …"), not a
retry request, so a model that keeps sending junk (or pydantic-ai's `TestModel`, which sends placeholders such
as "a") ends its run normally. `remember` stores a fact only if it reads like one: at least two words and
five letters (`MIN_FACT_WORDS`, `MIN_FACT_LETTERS`); "a" or "x1" is never stored.
"""

from __future__ import annotations

from uuid import UUID

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.toolsets import FunctionToolset

from .errors import InvalidMemoryInputError
from .manager import MemoryManager
from .models import FactCategory, MemorizedFact, MemoryUpdate
from .taxonomy import default_importance

__all__ = ["MIN_FACT_LETTERS", "MIN_FACT_WORDS", "memory_toolset"]

MIN_FACT_WORDS = 2
"""Words (with a letter) a fact needs to be stored by the `remember` tool: "Prefers brass" passes, "a" does not."""
MIN_FACT_LETTERS = 5
"""Letters a fact needs to be stored by the `remember` tool."""


def reads_like_a_fact(text: str) -> bool:
    """Whether `text` has at least `MIN_FACT_WORDS` words with letters and `MIN_FACT_LETTERS` letters."""
    words = [w for w in text.split() if any(c.isalpha() for c in w)]
    return len(words) >= MIN_FACT_WORDS and sum(c.isalpha() for c in text) >= MIN_FACT_LETTERS


def memory_toolset(memory: MemoryManager) -> FunctionToolset[object]:
    """A toolset with `search_memory`, `remember` and `forget`, bound to `memory`.

    Deps must carry `session_id` and `user_id` (see `MemoryDeps`). Add it with
    `MemoryCapability(memory, tools=True)` or `Agent(..., toolsets=[memory_toolset(memory)])`.
    """
    toolset: FunctionToolset[object] = FunctionToolset()

    def user_of(ctx: RunContext[object]) -> str:
        user_id = getattr(ctx.deps, "user_id", None)
        if user_id is None:
            raise ModelRetry("This conversation has no known user, so there is no long-term memory to use.")
        return str(user_id)

    @toolset.tool
    async def search_memory(ctx: RunContext[object], text: str) -> list[dict[str, str]]:
        """Find what is remembered about the user that answers `text` (a question, a word or a phrase).

        Returns items with their id (needed to forget one), kind, category and content, best first.
        """
        user_id = user_of(ctx)
        try:
            # Facts by the hybrid ranking (meaning, words, dates); preferences and projects by their text.
            hits = await memory.search(user_id, text, limit=10)
            others = [r for r in await memory.search_text(user_id, text, limit=10) if r.kind != "fact"]
        except InvalidMemoryInputError as exc:
            raise ModelRetry(str(exc)) from exc
        records = [hit.memory for hit in hits] + others
        return [{"id": str(r.id), "kind": r.kind, "category": r.category, "content": r.content} for r in records]

    @toolset.tool
    async def remember(ctx: RunContext[object], fact: str, category: FactCategory) -> str:
        """Store a lasting fact the user explicitly asked you to remember, as one short sentence.

        Categories: preference, requirement, constraint, feedback, rejection (something not to suggest again),
        goal, routine, contact, health_note (non-clinical only), fact. Never store payment data, passwords or
        clinical details: they are redacted or reduced before storage.
        """
        user_id = user_of(ctx)
        if not reads_like_a_fact(fact):
            return "Not stored: write the fact as one short sentence (at least two words)."
        try:
            # update_memory runs the sensitive-data filter (MemoryManager.sanitize_fact) and resolves dates.
            item = MemorizedFact(
                content=fact,
                category=category,
                confidence=0.95,
                source="explicit",
                importance=max(4, default_importance(category)),
            )
            stored = await memory.update_memory(
                MemoryUpdate(user_id=UUID(user_id), session_id=getattr(ctx.deps, "session_id", None), new_facts=[item])
            )
        except InvalidMemoryInputError as exc:
            return f"Not stored: {exc}"
        return f"Remembered (id {stored[0].id})." if stored else "Not stored: it did not meet the memory policy."

    @toolset.tool
    async def forget(ctx: RunContext[object], item_id: str) -> str:
        """Delete one remembered item, by the id `search_memory` returned, when the user asks to forget it."""
        try:
            deleted = await memory.forget(user_of(ctx), item_id)
        except InvalidMemoryInputError:
            return "No such item in this user's memory (ids are the ones search_memory returned)."
        return "Forgotten." if deleted else "No such item in this user's memory."

    return toolset
