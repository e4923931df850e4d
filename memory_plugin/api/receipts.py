"""`GET /api/memory/receipts`' body: what the agent was given on the signed-in user's recent turns (the stored
context receipts, `memory_plugin.context.receipt_store`), facts with their current text; and the receipt of the
context `POST /api/memory/context` just built (`TurnReceiptOut`)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel

from ..context.receipt import ContextReceipt
from ..context.receipt_store import StoredReceipt

__all__ = ["ReceiptFactOut", "ReceiptOut", "TurnReceiptOut", "receipt_out", "turn_receipt_out"]


class ReceiptFactOut(BaseModel):
    """One fact of a receipt: why it was given (or cut), what its line cost, and the score's parts."""

    id: UUID
    content: str
    """The fact's text now ("" when the fact was deleted since)."""
    category: str
    reason: str
    """search, ranked, rejection or slots."""
    tokens: int
    score: float | None = None
    components: dict[str, float] = {}


class TurnReceiptOut(BaseModel):
    """One turn's context receipt."""

    session_id: str
    at: datetime
    injected: list[ReceiptFactOut]
    """Facts and rejections shown that turn, in the order shown."""
    in_slots: list[ReceiptFactOut]
    """Facts the question found that the slots already showed."""
    cut: list[ReceiptFactOut]
    """Relevant facts the token budget left out, best first."""
    tokens: dict[str, int]
    """Tokens per part (profile, slots, summary, facts, rejections, frame, messages, prompt, total)."""
    messages_kept: int
    messages_dropped: int
    summary_cut: bool


class ReceiptOut(TurnReceiptOut):
    """One turn's context receipt, as stored."""

    id: int


def _facts(items: tuple[object, ...]) -> list[ReceiptFactOut]:
    return [ReceiptFactOut.model_validate(f, from_attributes=True) for f in items]


def turn_receipt_out(r: ContextReceipt) -> TurnReceiptOut:
    """The API's form of the receipt of a context just built."""
    return TurnReceiptOut(
        session_id=r.session_id, at=r.at, injected=_facts(r.injected), in_slots=_facts(r.in_slots),
        cut=_facts(r.cut), tokens=r.tokens, messages_kept=r.messages_kept, messages_dropped=r.messages_dropped,
        summary_cut=r.summary_cut,
    )  # fmt: skip


def receipt_out(stored: StoredReceipt) -> ReceiptOut:
    """The API's form of a stored receipt."""
    return ReceiptOut(id=stored.id, **turn_receipt_out(stored.receipt).model_dump())
