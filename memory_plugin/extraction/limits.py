"""`write_within_limits`: write extracted facts so that a statement over a database limit never holds the
session's extraction back, and nothing extracted is dropped unseen.

A write the database stops at its `statement_timeout` (or another per-statement limit, `StatementLimitError`)
fails the same way when sent again. Extraction used to leave its cursor where it was, so the same messages
were extracted and the same write timed out at every trigger, forever. Here a write stopped at the
`lock_timeout` (another transaction holds the user's rows for a moment: transient) is first sent again after a
short backoff; then any write over a limit is written in halves, down to single facts; a single fact still
over the limit is set aside with the reason, kept durably by the store beside the outage journal's set-aside
writes (`status` counts them, `memory-plugin journal` lists them, `--readmit` writes them, `--discard` drops
them), the rest is written, and the caller moves on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID, uuid5

from ..backoff import backoff_delay
from ..crypto.policy import mark_sensitive
from ..errors import MemoryPluginError, StatementLimitError
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, MemoryUpdate
from ..quality.outcome import RefusedFact, WriteOutcome
from ..rows import MemoryItem
from ..write.items import items_from_update
from ..write.pipeline import WritePipeline

__all__ = ["LOCK_RETRIES", "LimitedWrite", "SetAsideFact", "write_within_limits"]

LOCK_RETRIES = 3
"""Retries, per call, of a write stopped at the `lock_timeout` before it is split: a lock is held for a moment
(an erase, a concurrent write of the same rows). With `LOCK_BACKOFF_SECONDS` the waits are at most 0.25, 0.5 and
1 s: under 2 s on top of the lock waits themselves, a tenth of a job's lease."""
LOCK_BACKOFF_SECONDS = 0.25
"""Base of the exponential backoff (with jitter) between those retries."""


@dataclass(frozen=True, slots=True)
class SetAsideFact:
    """An extracted fact not written: alone, its write was still over a database limit."""

    content: str
    limit: str
    """The limit that stopped it ("statement_timeout", "lock_timeout", ...)."""
    reason: str
    """The error, as the database layer worded it."""
    write_id: UUID | None = None
    """Its write id in the set-aside writes (`memory-plugin journal --readmit/--discard --write-id`)."""
    kept: bool = False
    """Whether the store keeps it durably for review; False: only this report (and the log) has it."""


@dataclass(slots=True)
class LimitedWrite:
    """What `write_within_limits` wrote and what it set aside."""

    stored: list[MemorizedFact] = field(default_factory=list)
    superseded: list[MemorizedFact] = field(default_factory=list)
    outcomes: list[WriteOutcome] = field(default_factory=list)
    """One per part written (one when nothing was over a limit)."""
    set_aside: list[SetAsideFact] = field(default_factory=list)
    lock_retries: int = 0
    """Writes sent again after the `lock_timeout` stopped them."""

    @property
    def all_kept(self) -> bool:
        """Whether every fact set aside is kept durably for review."""
        return all(f.kept for f in self.set_aside)

    def summary(self) -> str:
        """One line for a log, a job's dead-letter record or `ExtractionRun.error`."""
        first = self.set_aside[0]
        where = (
            "kept for review: `memory-plugin journal` lists them, --readmit writes them, --discard drops them"
            if self.all_kept
            else "not kept by this store"
        )
        return (
            f"{len(self.set_aside)} extracted fact(s) set aside, each over the database's {first.limit} limit even"
            f" when written alone (the rest was written; {where}): {first.reason}"
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
    writer: WritePipeline,
    user_id: UUID,
    session_id: str,
    facts: Sequence[MemorizedFact],
    write_id: UUID | None,
    *,
    lock_retries: int = LOCK_RETRIES,
) -> LimitedWrite:
    """Write `facts` for the user. A write stopped at the `lock_timeout` is sent again (at most `lock_retries`
    times per call, with backoff); a part over a database limit is written in halves (each half's write id
    derived from `write_id`, so a job run again applies each part once), and a single fact still over it is
    set aside and handed to the store to keep (`LongTermStore.set_aside`). Any other error is raised as it is."""
    done = LimitedWrite()
    update = MemoryUpdate(user_id=user_id, session_id=session_id, new_facts=list(facts))
    await _write(writer, update, write_id, done, lock_retries)
    return done


async def _write(
    writer: WritePipeline, update: MemoryUpdate, write_id: UUID | None, done: LimitedWrite, lock_retries: int
) -> None:
    while True:
        try:
            outcome = await writer.update(update, write_id=write_id)
        except StatementLimitError as exc:
            if exc.limit == "lock_timeout" and done.lock_retries < lock_retries:
                delay = backoff_delay(done.lock_retries, base=LOCK_BACKOFF_SECONDS, maximum=4 * LOCK_BACKOFF_SECONDS)
                done.lock_retries += 1
                logger.info("%s extracted facts wait %.2f s for a lock: %s", LOG_PREFIX, delay, exc)
                await asyncio.sleep(delay)
                continue
            await _split(writer, update, write_id, done, lock_retries, exc)
            return
        done.outcomes.append(outcome)
        done.stored += outcome.stored
        done.superseded += outcome.superseded
        return


async def _split(
    writer: WritePipeline,
    update: MemoryUpdate,
    write_id: UUID | None,
    done: LimitedWrite,
    lock_retries: int,
    exc: StatementLimitError,
) -> None:
    facts = update.new_facts
    if len(facts) >= 2:
        middle = len(facts) // 2
        for part, half in enumerate((facts[:middle], facts[middle:])):
            part_id = None if write_id is None else uuid5(write_id, f"half-{part}")
            await _write(writer, update.model_copy(update={"new_facts": half}), part_id, done, lock_retries)
        return
    for fact in facts:
        fact_id = write_id or uuid.uuid4()
        kept = await _keep(writer, update, fact, fact_id, f"extracted from session {update.session_id}: {exc}")
        done.set_aside.append(SetAsideFact(fact.content, exc.limit, str(exc), fact_id, kept))


async def _keep(writer: WritePipeline, update: MemoryUpdate, fact: MemorizedFact, write_id: UUID, reason: str) -> bool:
    """Hand the fact, as the write would have stored it, to the store to keep for review; whether it kept it."""
    try:
        admitted = writer.admission.admit_or_refuse(fact, update.user_id)
        if not isinstance(admitted, MemorizedFact):
            return True  # the write would have refused it: there is nothing to keep
        items: list[MemoryItem] = items_from_update(
            [admitted], None, None, [], update.session_id, writer.settings.vocabulary
        )
        items = mark_sensitive(items, writer.settings.sensitive_categories, encrypting=writer.encrypting)
        return await writer.store.set_aside(update.user_id, items, writer.rules, write_id=write_id, reason=reason)
    except MemoryPluginError as keep_exc:  # reported with the fact; never lose the rest of the write over it
        logger.error("%s a set-aside extracted fact could not be kept: %s", LOG_PREFIX, keep_exc)
        return False
