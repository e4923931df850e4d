"""`ContextUpkeep`: keeps a user's slots and rolling summaries current after each turn (the half of
`ContextBuilder` that writes: patches from the facts a turn stored, summary rewrites, the hand-over to the next
session, the weekly resync, forgetting), so that `build` only reads."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from ..conversions import fact_from_record, preferences_from_records
from ..extraction.base import SummaryAnswer, SummaryRequest
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, MemoryContext, Message
from ..rows import MemoryRecord
from .receipt import ContextReceipt
from .slots import SlotPatch, Slots, slots_from_facts, with_profile
from .store import USER_SCOPE, ContextStore, SummaryVersion, apply_facts_to_slots, session_scope
from .summarizer import RollingSummarizer, SummaryPlan, SummaryUpdate

if TYPE_CHECKING:
    from ..extraction.runner import ExtractionRunner
    from ..quality.outcome import WriteOutcome

__all__ = ["ContextUpkeep", "MemorySource"]

_READS_FRESH_SECONDS = 10.0
"""How long a build's summary reads stand for the turn's update (a turn's background update starts within ms)."""


class MemorySource(Protocol):
    """What the builder reads from the memory manager (`MemoryManager` satisfies it)."""

    async def get_memory_context(
        self, session_id: str, user_id: str | UUID | None = None, *, query: str | None = None
    ) -> MemoryContext:
        """The session's short-term state and the user's relevant long-term memory."""
        ...

    async def list_memory(self, user_id: str | UUID, *, limit: int = 1000) -> list[MemoryRecord]:
        """Every stored item of the user, newest first."""
        ...


def _current_facts(records: Sequence[MemoryRecord]) -> list[MemorizedFact]:
    now = datetime.now(UTC)
    return [fact_from_record(r) for r in records if r.kind == "fact" and r.is_current(now) and not r.sensitive]


class ContextUpkeep:
    """The writing half of `ContextBuilder` (which sets these attributes)."""

    memory: MemorySource
    store: ContextStore
    summarizer: RollingSummarizer | None
    _reads: OrderedDict[tuple[str, UUID], tuple[float, dict[str, SummaryVersion]]]
    _unsaved: OrderedDict[tuple[str, UUID | None], ContextReceipt]

    @property
    def _summarizer(self) -> RollingSummarizer:
        assert self.summarizer is not None  # set in __post_init__
        return self.summarizer

    def _just_read(self, uid: UUID, session_id: str) -> dict[str, SummaryVersion] | None:
        """The summaries this session's build read, if young enough to be current (taken once): the turn's
        background update then costs no read (2 of its ~2.3 reads per turn on `bench.context_overhead`)."""
        read = self._reads.pop((session_id, uid), None)
        return read[1] if read is not None and time.monotonic() - read[0] < _READS_FRESH_SECONDS else None

    def _forget_reads(self, uid: UUID) -> None:
        """A summary of `uid` was written here: the reads kept for its sessions are stale."""
        for key in [k for k in self._reads if k[1] == uid]:
            del self._reads[key]

    async def resync_slots(self, user_id: UUID) -> Slots:
        """Rebuild the stored slots from the user's current facts (fields no fact fills are kept). The profile
        is not stored: it is the view of the stored preferences (`slots`); a profile an earlier version stored
        is dropped."""
        facts = _current_facts(await self.memory.list_memory(user_id))
        current = await self.store.read_slots(user_id)
        kept = Slots(fields={n: e for n, e in current.fields.items() if n != "profile"})
        target = slots_from_facts(facts, keep=kept)
        # One patch per changed field, compared against what was read.
        names = {*current.fields, *target.fields}
        changed = {n: target.get(n) for n in names if target.get(n) != current.get(n)}
        if changed:
            patch = SlotPatch(expected={n: current.get(n) for n in changed}, new=changed)
            if not await self.store.patch_slots(user_id, patch):
                return await self.store.read_slots(user_id)
        return target

    async def slots(self, user_id: UUID) -> Slots:
        """The user's slots as a turn sees them: the stored fields, and the profile from the stored preference
        rows (`conversions.preferences_from_records`, as `LongTermMemory.preferences`)."""
        records = await self.memory.list_memory(user_id)
        return with_profile(await self.store.read_slots(user_id), preferences_from_records(records))

    def follow(self, extraction: ExtractionRunner) -> None:
        """Keep the slots and the rolling summary current with what `extraction`'s background jobs write in
        this process: each job's facts (and what they superseded) patch the slots, and a summary due on a job
        is written in the job's own model call. The capability does this for its runs, and `memory-plugin
        worker` for the jobs it runs, so a worker in another process keeps the slots current too."""
        extraction.listen(id(self), self._background_facts)
        extraction.host_summaries(self)

    async def _background_facts(self, session_id: str, user_id: UUID, outcome: WriteOutcome) -> None:
        # A job brings facts, no messages: the summary cannot be due here, so only the slots are patched (no
        # summary reads: 2 of a job's messages to the database); the turn's own update writes the summary and
        # times the weekly resync.
        await self._patch_turn_slots(session_id, user_id, outcome.stored, outcome.superseded)

    async def _patch_turn_slots(
        self,
        session_id: str,
        uid: UUID,
        stored: Sequence[MemorizedFact],
        superseded: Sequence[MemorizedFact] | None,
    ) -> Sequence[MemorizedFact]:
        """Store the turn's receipt (kept unsaved by `build`) and patch the slots with the facts `stored` and
        those they `superseded` (None: read back); returns what was superseded."""
        # The turn's receipt rides on this after-turn work (off the request path when it is backgrounded).
        if (receipt := self._unsaved.pop((session_id, uid), None)) is not None:
            await self.store.add_receipt(uid, receipt)
        if superseded is None:
            # The caller does not know what the write superseded: the facts whose `superseded_by` names one of them.
            ids = {f.id for f in stored}
            records = await self.memory.list_memory(uid) if ids else []
            superseded = [fact_from_record(r) for r in records if r.kind == "fact" and r.superseded_by in ids]
        gone = [f.id for f in superseded] + [f.replaces for f in stored if f.replaces]
        if stored or gone:
            # Facts only: the profile is a view of the stored preferences, not patched here.
            await apply_facts_to_slots(self.store, uid, stored, superseded=gone)
        return superseded

    async def after_turn(
        self,
        session_id: str,
        user_id: str | UUID,
        messages: Sequence[Message],
        *,
        message_count: int | None = None,
        stored: Sequence[MemorizedFact] = (),
        superseded: Sequence[MemorizedFact] | None = (),
        extraction_ran: bool | None = None,
        summary_done: bool = False,
    ) -> SummaryUpdate:
        """After an exchange: patch the slots with the facts just stored and those they superseded
        (`WriteOutcome.stored` and `.superseded`, or `ExtractionRun`'s; `superseded=None` when unknown: they
        are read back), and rewrite the session's rolling summary if due; a new session summary is also
        the user's (what the next session starts from). `messages`: the session's messages, oldest first
        (its recent window is enough: new ones are told by timestamp, or by `message_count`, how many the
        session has had in all); `extraction_ran`:
        whether a fact extraction ran on this turn (`summary_with_extraction` waits for one); `summary_done`:
        the extraction's own call was asked for the summary (`ExtractionRun.summary_asked`), so it is not
        rewritten again here (a failed answer keeps the previous version until the next extraction). The
        profile is not patched here: it is a view of the stored preference rows (`slots`)."""
        uid = user_id if isinstance(user_id, UUID) else UUID(str(user_id))
        superseded = await self._patch_turn_slots(session_id, uid, stored, superseded)
        by_id = {f.id: f.content for f in stored if not f.sensitive}  # sealed text never goes into a summary
        replaced = {f.replaces: f.content for f in stored if f.replaces and not f.sensitive}
        outdated = [
            (old.content, replaced.get(old.id) or by_id.get(old.superseded_by) or "")  # type: ignore[arg-type]
            for old in (o for o in superseded if not o.sensitive)
        ]
        outdated = [(old, new) for old, new in outdated if new]
        # Read once (or taken from this turn's build): what a new session's first summary builds on, and what the
        # weekly resync is timed by.
        scope = session_scope(session_id)
        known = self._just_read(uid, session_id)
        user_summary = known.get(USER_SCOPE) if known is not None else await self._summarizer.current(uid, USER_SCOPE)
        session_summary = known.get(scope) if known is not None else ...
        if summary_done:
            current = await self._summarizer.current(uid, scope) if session_summary is ... else session_summary
            update = SummaryUpdate(current, False, None)
        else:
            update = await self._summarizer.update(
                uid,
                session_scope(session_id),
                messages,
                message_count=message_count,
                outdated=outdated,
                extraction_ran=extraction_ran,
                start_from=user_summary.content if user_summary else None,
                previous=session_summary,
                copy_to=USER_SCOPE,
            )
            user_summary = self._handed_over(uid, update) or user_summary
        if self._summarizer.resync_due(user_summary):
            # The weekly rebuild from the facts: the summary, and the slots (a fact deleted or expired since
            # leaves them here).
            facts = _current_facts(await self.memory.list_memory(uid))
            await self._summarizer.resync(uid, USER_SCOPE, facts)
            await self.resync_slots(uid)
        return update

    async def _session_plan(
        self, uid: UUID, session_id: str, messages: Sequence[Message], *, force: bool = False
    ) -> SummaryPlan:
        """The session summary's plan on an extraction turn; a session's first summary builds on the user's
        (what earlier sessions handed over: `plan` ignores it once the session has its own)."""
        user_summary = await self._summarizer.current(uid, USER_SCOPE)
        start_from = user_summary.content if user_summary else None
        return await self._summarizer.plan(
            uid, session_scope(session_id), messages, extraction_ran=True, force=force, start_from=start_from
        )

    def _handed_over(self, uid: UUID, update: SummaryUpdate) -> SummaryVersion | None:
        """A new session summary is also stored as the user's (`copy_to=USER_SCOPE`, in the same message): what the
        next session starts from. The reads kept for the user's sessions are stale now. Returns the version written
        (its resync time is the copy's), None when `update` wrote nothing."""
        if not update.written or update.current is None:
            return None
        self._forget_reads(uid)
        return update.current

    async def summary_request(
        self, session_id: str, user_id: UUID, messages: Sequence[Message]
    ) -> SummaryRequest | None:
        """The session summary to rewrite in an extraction's model call, when it is due (its own triggers, on
        the messages it does not cover yet); None otherwise (`SummaryHost`)."""
        plan = await self._session_plan(user_id, session_id, messages)
        if plan.reason is None:
            return None
        return SummaryRequest(plan.old_text, plan.fresh, plan.language, self._summarizer.policy.max_tokens)

    async def summary_answered(
        self, session_id: str, user_id: UUID, request: SummaryRequest, answer: SummaryAnswer
    ) -> None:
        """Store the summary an extraction's call wrote for `request` (`SummaryHost`): cut to the budget, a
        new version of the session's summary and the user's; a failed or empty one keeps the previous
        version (logged)."""
        if answer.text is None or not answer.text.strip():
            logger.warning(
                "%s the extraction returned no rolling summary (%s); previous version kept", LOG_PREFIX, answer.error
            )
            return
        plan = await self._session_plan(user_id, session_id, request.messages, force=True)
        if plan.reason is None:
            return  # another writer covered these messages meanwhile
        update = await self._summarizer.accept(
            user_id, session_scope(session_id), plan, answer.text, copy_to=USER_SCOPE
        )
        self._handed_over(user_id, update)

    async def forget(self, user_id: UUID, fact_ids: Sequence[UUID]) -> Slots:
        """Remove deleted facts from the slots (call it with the ids `MemoryManager.forget` deleted)."""
        return await apply_facts_to_slots(self.store, user_id, superseded=fact_ids)
