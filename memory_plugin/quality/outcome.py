"""`WriteOutcome`: what one `update_memory` did to the user's facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID

from ..models import MemorizedFact
from ..rows import MemoryRecord

__all__ = ["NoteBatchOutcome", "NoteOutcome", "NoteStatus", "RefusedFact", "WriteOutcome"]


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
    refused: list[RefusedFact] = field(default_factory=list)
    """Facts sent that the storage policy refused (below the confidence threshold, nothing storable left once
    sensitive data was removed), by position: the rest of the write went ahead."""


@dataclass(frozen=True, slots=True)
class RefusedFact:
    """A fact of an update that was not stored, and why."""

    index: int
    """Its position in `MemoryUpdate.new_facts`."""
    reason: str
    """Why ("below the confidence threshold", "only sensitive data", "clinical detail")."""


NoteStatus = Literal["stored", "merged", "refused"]
"""`stored`: a new memory; `merged`: it repeated one exactly (stored before, or earlier in the batch), which it
reinforced; `refused`: nothing meaningful was left once sensitive data was removed (nothing written)."""


@dataclass(frozen=True, slots=True)
class NoteOutcome:
    """What happened to one note of `remember_many` (by its position in the input)."""

    index: int
    """The note's position in the batch."""
    status: NoteStatus
    """Stored, merged into an existing memory, or refused."""
    record: MemoryRecord | None = None
    """The memory it is now (None when refused)."""
    redacted: tuple[str, ...] = ()
    """Kinds of data replaced by placeholders before storing ("payment_card", "health:diagnosis", …)."""
    reason: str | None = None
    """Why it was refused."""


@dataclass(frozen=True, slots=True)
class NoteBatchOutcome:
    """`remember_many_detailed`'s report: one `NoteOutcome` per note, in input order. A note the policy refuses
    never fails the batch: the others are stored and it is reported here."""

    notes: list[NoteOutcome] = field(default_factory=list)

    @property
    def records(self) -> list[MemoryRecord]:
        """The memories written, one per distinct note, in input order."""
        seen: dict[UUID, MemoryRecord] = {}
        for note in self.notes:
            if note.record is not None:
                seen.setdefault(note.record.id, note.record)
        return list(seen.values())

    @property
    def refused(self) -> list[NoteOutcome]:
        """The notes not stored, with why."""
        return [n for n in self.notes if n.status == "refused"]

    def count(self, status: NoteStatus) -> int:
        """How many notes ended with `status`."""
        return sum(1 for n in self.notes if n.status == status)
