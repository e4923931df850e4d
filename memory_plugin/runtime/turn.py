"""`finish_turn`: the end of one conversational turn, the same for every face (the capability's `after_run`, the
shop's workflow, an API route): record the exchange, extract now or queue the extraction (the policy decides
whether one is due), then patch the slots and the rolling summary from what was stored.

Every step reports instead of raising: the answer exists already, and failing now would cost the user the model
call. What happened is the returned `TurnOutcome`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from ..errors import MemoryPluginError
from ..extraction.policy import ExtractionRun
from ..extraction.runner import ScheduledExtraction
from ..logs import LOG_PREFIX, logger

if TYPE_CHECKING:  # the facade calls this module with itself; the turn uses only its public operations
    from ..context.builder import ContextBuilder
    from ..manager import MemoryManager

__all__ = ["TurnOutcome", "finish_turn"]


@dataclass(frozen=True)
class TurnOutcome:
    """What `finish_turn` did."""

    recorded: bool = True
    """False when the exchange could not be recorded (logged and counted in `stats.exchanges_not_recorded`)."""
    extraction: ExtractionRun | None = None
    """The inline extraction, when one ran now (its `stored` facts are readable at once)."""
    scheduled: ScheduledExtraction | None = None
    """The queued extraction, when the background worker will run it (`flush` waits for it)."""
    error: str | None = None
    """Why the facts could not be extracted or queued (the messages stay pending for the next trigger)."""

    @property
    def extraction_ran(self) -> bool:
        """Whether an extraction ran now or was queued on this turn."""
        ran = self.extraction is not None and self.extraction.trigger is not None
        return ran or (self.scheduled is not None and self.scheduled.job_id is not None)


async def finish_turn(
    memory: MemoryManager,
    session_id: str,
    user_id: str | UUID | None,
    *,
    prompt: str | None = None,
    answer: str | None = None,
    extract: bool = True,
    inline: bool | None = None,
    end_of_request: bool = False,
    context: ContextBuilder | None = None,
) -> TurnOutcome:
    """End one turn (see the module docstring). `prompt`/`answer`: the exchange to record (None: the caller
    recorded its messages itself). `inline`: extract before returning (True) or queue (False); None: the
    settings' choice. `context`: the builder whose slots and summary follow the turn (patched inline when the
    extraction is, else off the request path)."""
    recorded = True
    if prompt is not None or answer is not None:
        recorded = await memory.record_exchange(session_id, user_id, prompt or "", answer or "")
    run = scheduled = None
    error: str | None = None
    now = memory.extracts_inline(inline)
    if extract and user_id is not None:
        try:
            # The extraction policy decides: an explicit memory instruction, the end of a request, or the
            # cadence of user messages; one batched call covers everything not extracted yet.
            if now:
                run = await memory.extract_if_due(session_id, user_id, end_of_request=end_of_request)
                error = run.error
            else:
                scheduled = await memory.schedule_extraction(session_id, user_id, end_of_request=end_of_request)
                error = scheduled.error
        except MemoryPluginError as exc:
            logger.warning("%s could not store facts after the turn: %s", LOG_PREFIX, exc)
            error = str(exc)
    outcome = TurnOutcome(recorded, run, scheduled, error)
    if context is not None and user_id is not None:
        update = _update_context(context, memory, session_id, user_id, outcome)
        if now:
            await update
        else:
            # Slots and summary are derived data: off the request path (a summary model call takes seconds).
            memory.run_in_background(update, name="memory_plugin-context-update")
    return outcome


async def _update_context(
    context: ContextBuilder, memory: MemoryManager, session_id: str, user_id: str | UUID, outcome: TurnOutcome
) -> None:
    """The slots from the facts an inline extraction stored and those it superseded, and the rolling summary if
    due (unless the extraction's own call writes it). Never raises."""
    run, scheduled = outcome.extraction, outcome.scheduled
    queued = scheduled is not None and scheduled.job_id is not None
    try:
        if await memory.memory_paused(user_id):  # the database would refuse them: no summary model call
            return
        short = await memory.get_short_term(session_id, user_id=user_id)
        await context.after_turn(
            session_id,
            user_id,
            short.messages,
            stored=run.stored if run else (),
            superseded=run.superseded if run else (),
            extraction_ran=outcome.extraction_ran,
            # A queued job asks for a due summary in its own call when the runner has a summary host and an
            # extractor that writes summaries; it runs here or in `memory-plugin worker`, which follows the
            # manager's own context builder (`ContextBuilder.follow`).
            summary_done=(run is not None and run.summary_asked) or (queued and memory.extraction.writes_summaries),
        )
    except MemoryPluginError as exc:
        logger.warning("%s could not update the slots or the summary after the turn: %s", LOG_PREFIX, exc)
