"""`WriteOutcome`: what one `update_memory` did to the user's facts."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models import MemorizedFact

__all__ = ["WriteOutcome"]


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """The facts a write stored and how (`MemoryManager.update_memory_detailed`).

    A fact sent is either inserted (a new row), reinforced (it repeated a stored fact exactly, or closely
    enough to be a near-duplicate: see `memory_plugin/quality/matching.py`), or not stored (below the
    confidence threshold, only sensitive data). Separately, stored facts it contradicted are superseded.
    """

    stored: list[MemorizedFact] = field(default_factory=list)
    """The current facts the write inserted or reinforced, as they are now in the store."""
    inserted: int = 0
    """New fact rows."""
    reinforced: int = 0
    """Stored facts stated again (exact repeats and near-duplicates)."""
    near_duplicates: int = 0
    """Of the facts sent, those merged into a similar fact (stored or in the same write) instead of inserted."""
    superseded: list[MemorizedFact] = field(default_factory=list)
    """Facts that stopped being current because of this write (`replaces`, or a new value of their slot);
    they keep their rows, with `invalid_at` and `superseded_by` set."""
