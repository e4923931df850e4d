"""`write_within_limits`: write extracted facts so that a statement over a database limit never holds the
session's extraction back.

A write the database stops at its `statement_timeout` (or another per-statement limit, `StatementLimitError`)
fails the same way when sent again. Extraction used to leave its cursor where it was, so the same messages
were extracted and the same write timed out at every trigger, forever. Here the facts are written in halves,
down to single facts; a single fact still over the limit is set aside with the reason (returned, for the
caller to report), the rest is written, and the caller moves on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID, uuid5

from ..errors import StatementLimitError
from ..models import MemorizedFact, MemoryUpdate
from ..quality.outcome import RefusedFact, WriteOutcome
from ..write.pipeline import WritePipeline

__all__ = ["LimitedWrite", "SetAsideFact", "write_within_limits"]


@dataclass(frozen=True, slots=True)
class SetAsideFact:
    """An extracted fact not written: alone, its write was still over a database limit."""

    content: str
    limit: str
    """The limit that stopped it ("statement_timeout", "lock_timeout", ...)."""
    reason: str
    """The error, as the database layer worded it."""


@dataclass(slots=True)
class LimitedWrite:
    """What `write_within_limits` wrote and what it set aside."""

    stored: list[MemorizedFact] = field(default_factory=list)
    superseded: list[MemorizedFact] = field(default_factory=list)
    outcomes: list[WriteOutcome] = field(default_factory=list)
    """One per part written (one when nothing was over a limit)."""
    set_aside: list[SetAsideFact] = field(default_factory=list)

    def summary(self) -> str:
        """One line for a log, a job's dead-letter record or `ExtractionRun.error`."""
        first = self.set_aside[0]
        return (
            f"{len(self.set_aside)} extracted fact(s) set aside, each over the database's {first.limit} limit even"
            f" when written alone (the rest was written): {first.reason}"
        )

    def merged(self) -> WriteOutcome:
        """The parts' outcomes as one (refused facts keep their position within their own part)."""
        if len(self.outcomes) == 1:
            return self.outcomes[0]
        refused: list[RefusedFact] = [r for o in self.outcomes for r in o.refused]
        return WriteOutcome(
            stored=list(self.stored),
            inserted=sum(o.inserted for o in self.outcomes),
            reinforced=sum(o.reinforced for o in self.outcomes),
            near_duplicates=sum(o.near_duplicates for o in self.outcomes),
            superseded=list(self.superseded),
            refused=refused,
        )


async def write_within_limits(
    writer: WritePipeline, user_id: UUID, session_id: str, facts: Sequence[MemorizedFact], write_id: UUID | None
) -> LimitedWrite:
    """Write `facts` for the user; a part over a database limit is written in halves (each half's write id
    derived from `write_id`, so a job run again applies each part once), and a single fact still over it is
    set aside. Any other error is raised as it is."""
    done = LimitedWrite()
    await _write(writer, MemoryUpdate(user_id=user_id, session_id=session_id, new_facts=list(facts)), write_id, done)
    return done


async def _write(writer: WritePipeline, update: MemoryUpdate, write_id: UUID | None, done: LimitedWrite) -> None:
    try:
        outcome = await writer.update(update, write_id=write_id)
    except StatementLimitError as exc:
        facts = update.new_facts
        if len(facts) < 2:
            done.set_aside += [SetAsideFact(f.content, exc.limit, str(exc)) for f in facts]
            return
        middle = len(facts) // 2
        for part, half in enumerate((facts[:middle], facts[middle:])):
            part_id = None if write_id is None else uuid5(write_id, f"half-{part}")
            await _write(writer, update.model_copy(update={"new_facts": half}), part_id, done)
        return
    done.outcomes.append(outcome)
    done.stored += outcome.stored
    done.superseded += outcome.superseded
