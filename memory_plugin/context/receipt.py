"""`ContextReceipt`: what one turn's context gave the model and why, for the application to read.

A receipt says which facts were injected (and why: the search score and its parts, or "rejection" /
"ranked" when no search chose them), how many tokens each part took, and what the budget cut. The capability
puts it on the run's deps (`MemoryDeps.receipt`) and the manager keeps the last one per session and user
(`MemoryManager.last_receipt`). Pure: built from the assembled context, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal
from uuid import UUID

from ..models import MemorizedFact
from .budget import AssembledContext, ContextReport
from .tokens import TokenCounter

__all__ = ["ContextReceipt", "FactReason", "ReceiptFact", "receipt_for"]

FactReason = Literal["search", "ranked", "rejection", "slots"]
"""Why a fact is in the context: a search for the message chose it (`score` says how), it was ranked without
a query (importance, confidence, recency), it is a rejection (always shown), or the slots show it."""


@dataclass(frozen=True)
class ReceiptFact:
    """One fact of the receipt."""

    id: UUID
    content: str
    category: str
    reason: FactReason
    tokens: int
    """What its line costs."""
    score: float | None = None
    """The search score (None unless `reason == "search"`)."""
    components: Mapping[str, float] = field(default_factory=dict)
    """The score's non-zero parts (`ScoreComponents`: text, vector, importance, recency…)."""


@dataclass(frozen=True)
class ContextReceipt:
    """What one turn's context held: facts injected and why, tokens per part, and what was cut."""

    session_id: str
    user_id: UUID | None
    at: datetime
    report: ContextReport
    """Tokens per part (profile, slots, summary, facts, rejections, messages, prompt, frames) and counts."""
    injected: tuple[ReceiptFact, ...]
    """Relevant facts and rejections shown this turn, in the order shown."""
    in_slots: tuple[ReceiptFact, ...]
    """Facts the query found that the slots (in the instructions) already show."""
    cut: tuple[ReceiptFact, ...]
    """Relevant facts left out for the budget, best first."""
    standing_tokens: int
    """The instructions' memory block (the part cached from turn to turn)."""
    turn_tokens: int
    """The per-turn block (a request-scoped system part)."""
    messages_kept: int
    messages_dropped: int
    summary_cut: bool

    @property
    def tokens(self) -> dict[str, int]:
        """Tokens per part, as the report counts them."""
        r = self.report
        return {
            "profile": r.profile,
            "slots": r.slots,
            "summary": r.summary,
            "facts": r.facts,
            "rejections": r.rejections,
            "frame": r.frame + r.turn_frame,
            "messages": r.messages,
            "prompt": r.prompt,
            "total": r.total,
        }


def _fact(
    fact: MemorizedFact, reason: FactReason, scores: Mapping[UUID, Mapping[str, float]], counter: TokenCounter
) -> ReceiptFact:
    found = scores.get(fact.id)
    if found is not None and reason != "slots":
        parts = {k: v for k, v in found.items() if k != "score" and v}
        return ReceiptFact(
            fact.id, fact.content, fact.category, "search" if reason == "ranked" else reason,
            counter.count(fact.content), found.get("score"), parts,
        )  # fmt: skip
    return ReceiptFact(fact.id, fact.content, fact.category, reason, counter.count(fact.content))


def receipt_for(
    session_id: str,
    user_id: UUID | None,
    built: AssembledContext,
    scores: Mapping[UUID, Mapping[str, float]],
    counter: TokenCounter,
) -> ContextReceipt:
    """The receipt of `built` (`scores`: `MemoryContext.fact_scores`)."""
    return ContextReceipt(
        session_id=session_id,
        user_id=user_id,
        at=datetime.now(UTC),
        report=built.report,
        injected=(
            *(_fact(f, "ranked", scores, counter) for f in built.facts),
            *(_fact(f, "rejection", scores, counter) for f in built.rejections),
        ),
        in_slots=tuple(_fact(f, "slots", scores, counter) for f in built.in_slots),
        cut=tuple(_fact(f, "ranked", scores, counter) for f in built.facts_cut),
        standing_tokens=counter.count(built.standing),
        turn_tokens=counter.count(built.turn),
        messages_kept=built.report.messages_kept,
        messages_dropped=built.report.messages_dropped,
        summary_cut=built.report.summary_cut,
    )
