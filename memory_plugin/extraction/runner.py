"""`ExtractionRunner`: when the extraction policy says so, extracts lasting facts from the session's messages
not extracted yet, in one model call, and stores them through the write pipeline — now (`run`), or in the
background (`schedule` queues a job carrying the messages; a `BackgroundWorker` calls `run_job`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from ..background.jobs import EnqueueOutcome, ExtractionJob, JobQueue
from ..conversions import fact_from_record
from ..errors import ExtractionError, MemoryPluginError, StatementLimitError, StoreError, StoreUnavailableError
from ..failures import StoreFailures
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, Message
from ..quality.matching import is_near_duplicate, keys_of
from ..quality.outcome import WriteOutcome
from ..session import SessionBackend, session_calls
from ..settings import MemorySettings
from ..store import ContextQuery, LongTermStore
from ..write.pipeline import WritePipeline
from .base import FactExtractor, SummarizingExtractor, SummaryAnswer, SummaryHost, SummaryRequest
from .limits import LimitedWrite, write_within_limits
from .policy import ExtractionCursors, ExtractionPolicy, ExtractionRun, ExtractionTrigger, is_small_talk

FactsWritten = Callable[[str, UUID, WriteOutcome], Awaitable[None]]
"""Told what a background job wrote: the session, the user, the write's outcome."""

__all__ = ["Extracted", "ExtractionRunner", "ExtractionStats", "FactsWritten", "ScheduledExtraction"]


@dataclass(slots=True)
class Extracted:
    """What `ExtractionRunner.extract` returns."""

    facts: list[MemorizedFact] = field(default_factory=list)
    """The accepted candidate facts (not stored)."""
    summary: SummaryAnswer | None = None
    """The rolling summary the same call wrote, when one was asked of a `SummarizingExtractor`."""


@dataclass(slots=True)
class ExtractionStats:
    """What extractions did (see `MemoryStats` for each counter)."""

    extraction_calls: int = 0
    extraction_model_calls: int = 0
    extraction_failures: int = 0
    facts_rejected: int = 0
    extraction_rejections: dict[str, int] = field(default_factory=dict)
    extraction_fields_dropped: int = 0
    extractions_explicit: int = 0
    extractions_end_of_request: int = 0
    extractions_cadence: int = 0
    extractions_skipped: int = 0
    extraction_facts_set_aside: int = 0


@dataclass(slots=True)
class ScheduledExtraction:
    """What one `MemoryManager.schedule_extraction` call did (it never waits for the extraction)."""

    trigger: ExtractionTrigger | None = None
    """Why a job was queued; None when nothing was due."""
    messages: int = 0
    """Pending messages handed to the job."""
    outcome: EnqueueOutcome | None = None
    """"queued" (a new job), "coalesced" (added to the session's waiting job), "deferred" (the user is at their
    limit of waiting jobs: the messages wait in the user's backlog, a job that becomes due when the user's jobs
    fall below the limit), "full" (refused: the messages stay pending in the session for the next trigger); None
    when nothing was due."""
    job_id: int | None = None
    """The job that will extract them."""
    skipped: bool = False
    """True when the pending messages were only small talk: the cursor moved on, nothing queued."""
    error: str | None = None
    """Why the job could not be queued (the queue's database is unreachable); the messages stay pending."""


class ExtractionRunner:
    """Runs the extractor on a session's pending messages; at most one extraction per session at a time."""

    def __init__(
        self,
        settings: MemorySettings,
        extractor: FactExtractor,
        sessions: SessionBackend,
        writer: WritePipeline,
        store: LongTermStore,
        failures: StoreFailures,
        candidate_query: ContextQuery,
    ) -> None:
        self.settings = settings
        self.extractor = extractor
        self.sessions = sessions
        self._session_calls = session_calls(sessions)
        """Awaited on the loop's own pool (Postgres on the assembly's), inline in RAM, else in a thread."""
        self.writer = writer
        self.store = store
        self.failures = failures
        self.policy = ExtractionPolicy.from_settings(settings)
        """When extraction runs (triggers, cadence)."""
        self.stats = ExtractionStats()
        self._candidate_query = candidate_query
        self._cursors = ExtractionCursors(settings.max_sessions)
        self.jobs_refused = 0
        """Triggers a full queue refused (their messages stayed pending in the session)."""
        self.jobs_deferred = 0
        """Triggers whose messages went to the user's backlog (the user was at their limit of waiting jobs)."""
        self.jobs_dropped = 0
        """Jobs not applied because their user was erased or the job cancelled before its write."""
        self.facts_dropped_forgotten = 0
        """Extracted facts not written because the user forgot a matching memory after the job was queued."""
        self._listeners: dict[object, FactsWritten] = {}
        self._summaries: SummaryHost | None = None

    async def run(
        self, session_id: str, user_id: UUID, *, end_of_request: bool = False, force: bool = False
    ) -> ExtractionRun:
        """One extraction if due (`force`: whenever messages are pending); see `MemoryManager.extract_if_due`."""
        async with self._cursors.flight(session_id):
            # Decided under the lock: a trigger that waited for the previous extraction sees the cursor it
            # moved, so messages are never extracted twice and a burst of triggers makes one call.
            short = await self._session_calls.snapshot(session_id, user_id=user_id)
            pending = self._cursors.pending(session_id, short.messages)
            trigger: ExtractionTrigger | None = (
                "manual" if force and pending else self.policy.decide(pending, end_of_request=end_of_request)
            )
            if trigger is None:
                return self._maybe_skip(session_id, pending, end_of_request)
            run = ExtractionRun(trigger=trigger, messages=len(pending))
            self._count_trigger(trigger)
            try:
                known = await self._candidate_facts(user_id)
                summary = await self._summary_request(session_id, user_id, short.messages)
                run.summary_asked = summary is not None
                extracted = await self.extract(pending, user_id, known_facts=known, summary=summary)
                if extracted.facts:
                    written = await write_within_limits(self.writer, user_id, session_id, extracted.facts, None)
                    run.stored, run.superseded = written.stored, written.superseded
                    if written.set_aside:
                        run.set_aside, run.error = len(written.set_aside), written.summary()
                        self._report_set_aside(session_id, written)
                await self._store_summary(session_id, user_id, summary, extracted.summary)
            except MemoryPluginError as exc:
                run.error = str(exc)
                logger.warning("%s extraction (%s) failed for session %s: %s", LOG_PREFIX, trigger, session_id, exc)
            else:
                self._cursors.advance(session_id, pending)
            return run

    async def schedule(
        self, queue: JobQueue, session_id: str, user_id: UUID, *, end_of_request: bool = False
    ) -> ScheduledExtraction:
        """Decide as `run` does, but queue the extraction instead of running it: the job carries the pending
        messages (another process may run it), and the cursor moves past them once the queue has them."""
        async with self._cursors.flight(session_id):
            short = await self._session_calls.snapshot(session_id, user_id=user_id)
            pending = self._cursors.pending(session_id, short.messages)
            trigger = self.policy.decide(pending, end_of_request=end_of_request)
            if trigger is None:
                skipped = self._maybe_skip(session_id, pending, end_of_request)
                return ScheduledExtraction(skipped=skipped.skipped, messages=skipped.messages)
            try:
                job_id, outcome = await queue.enqueue(user_id, session_id, pending, trigger)
            except StoreError as exc:
                logger.warning("%s could not queue extraction for session %s: %s", LOG_PREFIX, session_id, exc)
                return ScheduledExtraction(trigger=trigger, messages=len(pending), error=str(exc))
            if outcome == "full":
                # The user's backlog is full too (10x their limit of waiting jobs): refuse, never grow. The
                # messages stay pending in the session, and its next trigger carries them once there is room.
                self.jobs_refused += 1
                logger.warning(
                    "%s extraction queue full for user %s (waiting jobs and backlog at their limits): session %s"
                    " keeps %d messages pending", LOG_PREFIX, user_id, session_id, len(pending),
                )  # fmt: skip
            else:
                if outcome == "deferred":
                    self.jobs_deferred += 1
                    logger.info(
                        "%s user %s is at their limit of waiting extraction jobs: %d messages of session %s wait"
                        " in the user's backlog (job %s)", LOG_PREFIX, user_id, len(pending), session_id, job_id,
                    )  # fmt: skip
                self._cursors.advance(session_id, pending)
                self._count_trigger(trigger)
            return ScheduledExtraction(trigger=trigger, messages=len(pending), outcome=outcome, job_id=job_id)

    async def run_job(self, job: ExtractionJob, queue: JobQueue, worker: str) -> None:
        """Run a queued extraction: extract from the job's messages, then, holding the job, write the facts
        once (the job's `write_id`) unless the user was erased since, leaving out facts matching a memory the
        user forgot since. Raises on failure (the worker retries the job)."""
        known = await self._candidate_facts(job.user_id)
        summary = await self._summary_request(job.session_id, job.user_id, job.messages)
        extracted = await self.extract(job.messages, job.user_id, known_facts=known, summary=summary)
        facts = extracted.facts
        async with queue.hold(job, worker) as hold:
            if hold.forgotten is None:
                self.jobs_dropped += 1
                logger.info("%s memory job %d dropped: its user was erased or the job cancelled", LOG_PREFIX, job.id)
                return
            await self._store_summary(job.session_id, job.user_id, summary, extracted.summary)
            vocabulary = self.settings.vocabulary
            forgotten = [keys_of(content, vocabulary) for content in hold.forgotten]  # once per job, not per fact
            kept = [f for f in facts if not self._forgotten(f, forgotten)]
            self.facts_dropped_forgotten += len(facts) - len(kept)
            if not kept:
                return
            written = await write_within_limits(self.writer, job.user_id, job.session_id, kept, job.write_id)
            if written.set_aside:
                # What was written stays (the job's parts have their own write ids) and the job completes: the
                # facts still over a limit alone are kept by the store for review. A store that cannot keep them
                # fails the job for good instead, so the dead job holds them (`status`, `worker --retry-dead`);
                # the session's later jobs go on either way.
                self._report_set_aside(job.session_id, written)
                if not written.all_kept:
                    limit = written.set_aside[0].limit
                    raise StatementLimitError(f"memory job {job.id}: {written.summary()}", limit=limit)
            outcome = written.merged()
        for listener in list(self._listeners.values()):
            try:
                await listener(job.session_id, job.user_id, outcome)
            except MemoryPluginError as exc:  # the facts are stored; a listener's failure is only reported
                logger.warning("%s after a background write of session %s: %s", LOG_PREFIX, job.session_id, exc)

    def _report_set_aside(self, session_id: str, written: LimitedWrite) -> None:
        self.stats.extraction_facts_set_aside += len(written.set_aside)
        logger.error("%s extraction of session %s: %s", LOG_PREFIX, session_id, written.summary())

    def listen(self, key: object, listener: FactsWritten) -> None:
        """Call `listener(session_id, user_id, outcome)` after each background job of this process writes facts
        (one listener per `key`: registering the same key again replaces it). What runs inline is returned to
        its caller instead."""
        self._listeners[key] = listener

    def host_summaries(self, host: SummaryHost | None) -> None:
        """Let `host` (a `ContextBuilder`) have the rolling summary rewritten in the extraction's own model call
        when it is due on an extraction (with a `SummarizingExtractor`: one call instead of two). None
        detaches it."""
        self._summaries = host

    @property
    def writes_summaries(self) -> bool:
        """True when a due rolling summary is written in the extraction's own call (a summary host and a
        `SummarizingExtractor`)."""
        return self._summaries is not None and isinstance(self.extractor, SummarizingExtractor)

    async def _summary_request(
        self, session_id: str, user_id: UUID, messages: Sequence[Message]
    ) -> SummaryRequest | None:
        """The summary to ask for in this extraction's call; None without a host, with an extractor that
        cannot write one, when not due, or when the summary cannot be read now (it waits for its next turn)."""
        if self._summaries is None or not self.writes_summaries:
            return None
        try:
            return await self._summaries.summary_request(session_id, user_id, messages)
        except StoreError as exc:
            logger.warning("%s rolling summary not asked with this extraction: %s", LOG_PREFIX, exc)
            return None

    async def _store_summary(
        self, session_id: str, user_id: UUID, request: SummaryRequest | None, answer: SummaryAnswer | None
    ) -> None:
        if request is None or answer is None or self._summaries is None:
            return
        try:
            await self._summaries.summary_answered(session_id, user_id, request, answer)
        except StoreError as exc:  # derived data: the facts matter, the summary is rewritten on a later turn
            logger.warning("%s rolling summary from the extraction not stored: %s", LOG_PREFIX, exc)

    def _forgotten(self, fact: MemorizedFact, forgotten: Sequence[tuple[str, str, tuple[str, ...]]]) -> bool:
        """Whether `fact` restates a memory the user forgot (`forgotten`: their `keys_of`): the same text, or a
        near-duplicate of it, judged as the write path judges them (the store's vocabulary)."""
        keys = keys_of(fact.content, self.settings.vocabulary)
        threshold = min(self.settings.near_duplicate_threshold, 1.0)
        return any(is_near_duplicate(keys, other, threshold) for other in forgotten)

    async def extract(
        self,
        messages: Sequence[Message],
        user_id: UUID,
        *,
        known_facts: Sequence[MemorizedFact] = (),
        summary: SummaryRequest | None = None,
    ) -> Extracted:
        """Candidate facts from `messages`, not stored (see `MemoryManager.extract_facts_from_conversation`);
        with `summary` and a `SummarizingExtractor`, the same model call also rewrites the rolling summary.
        Every extraction path goes through here."""
        if not messages:
            return Extracted()
        self.stats.extraction_calls += 1
        try:
            if summary is not None and isinstance(self.extractor, SummarizingExtractor):
                outcome = await self.extractor.extract_with_summary(
                    list(messages), known_facts=list(known_facts), summary=summary
                )
            else:
                outcome = await self.extractor.extract(list(messages), known_facts=list(known_facts))
        except ExtractionError:
            self.stats.extraction_failures += 1
            raise
        self.stats.extraction_model_calls += outcome.model_calls
        self.stats.facts_rejected += outcome.rejected
        self.stats.extraction_fields_dropped += sum(outcome.dropped_fields.values())
        for reason, count in outcome.rejections.items():
            self.stats.extraction_rejections[reason] = self.stats.extraction_rejections.get(reason, 0) + count
        if outcome.rejections or outcome.dropped_fields:
            logger.info(
                "%s extraction output: rejected %s, fields dropped %s",
                LOG_PREFIX,
                outcome.rejections or "{}",
                outcome.dropped_fields or "{}",
            )
        accepted: list[MemorizedFact] = []
        for fact in outcome.facts:
            too_long = len(fact.content) > self.settings.max_fact_chars
            if too_long or fact.confidence < self.settings.min_fact_confidence:
                self.stats.facts_rejected += 1
                continue
            accepted.append(fact.model_copy(update={"user_id": user_id}))
        logger.info(
            "%s extracted %d facts (%d rejected) with %s",
            LOG_PREFIX,
            len(accepted),
            outcome.rejected + len(outcome.facts) - len(accepted),
            self.extractor.name,
        )
        return Extracted(accepted, outcome.summary if summary is not None else None)

    def _maybe_skip(self, session_id: str, pending: Sequence[Message], end_of_request: bool) -> ExtractionRun:
        """Nothing due. If a trigger would have fired but the pending user messages are only small talk,
        move the cursor past them so they are not carried along forever."""
        users = [m for m in pending if m.role == "user"]
        small_talk_only = bool(users) and all(is_small_talk(m.content) for m in users)
        if small_talk_only and (end_of_request or len(users) >= self.policy.every_n_user_messages):
            self._cursors.advance(session_id, pending)
            self.stats.extractions_skipped += 1
            return ExtractionRun(skipped=True, messages=len(pending))
        return ExtractionRun()

    def _count_trigger(self, trigger: ExtractionTrigger) -> None:
        if trigger == "explicit":
            self.stats.extractions_explicit += 1
        elif trigger == "end_of_request":
            self.stats.extractions_end_of_request += 1
        elif trigger == "cadence":
            self.stats.extractions_cadence += 1

    async def _candidate_facts(self, user_id: UUID) -> list[MemorizedFact]:
        """The user's best-ranked current facts (`extraction_candidate_facts` of them), given to the extractor
        with their ids for `replaces`; [] when the store cannot be read now (extraction goes on without)."""
        if self.settings.extraction_candidate_facts == 0:
            return []
        try:
            # Not `read_context`: that would replace the user's outage copy (what the agent sees) with this
            # wider, facts-only read.
            records = await self.store.peek_context(user_id, self._candidate_query)
        except StoreError as exc:
            if self.settings.require_pg_memory and isinstance(exc, StoreUnavailableError):
                raise
            self.failures.report("reading candidate facts for extraction", exc)
            return []
        return [fact_from_record(r) for r in records if r.kind == "fact"]
