"""`Turn`: one conversational turn, the same for every face (the capability's `for_run`/`after_run`, the shop's
workflow, an API route).

- `start`: check that memory could record the turn (before any model call, so a turn memory would refuse costs
  none), then read the context the model is given: the budgeted context of a `ContextBuilder`, or the session's
  state plus the user's long-term memory (`get_memory_context`, which binds a new session to the user).
- `finish`: record the exchange, extract now or queue the extraction (the policy decides whether one is due),
  then patch the slots and the rolling summary from what was stored. Every step reports instead of raising: the
  answer exists already, and failing now would cost the user the model call. What happened is the returned
  `TurnOutcome`.

    turn = memory.turn(session_id, user_id)
    start = await turn.start(prompt)
    ...  # the model call
    outcome = await turn.finish(prompt=prompt, answer=answer)
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from ..errors import MemoryPluginError
from ..extraction.policy import ExtractionRun
from ..extraction.runner import ScheduledExtraction
from ..logs import LOG_PREFIX, logger
from ..models import MemoryContext, ShortTermMemory

if TYPE_CHECKING:  # types only: pydantic-ai and the context assembly load with the first budgeted turn
    from pydantic_ai.messages import ModelMessage

    from ..context.budget import AssembledContext
    from ..context.builder import ContextBuilder
    from ..context.receipt import ContextReceipt

__all__ = ["Turn", "TurnMemory", "TurnOutcome", "TurnStart"]


class TurnMemory(Protocol):
    """The operations of the facade a turn uses (`MemoryManager` satisfies it): the turn depends on these, not
    on the facade, so the facade may import the turn without a circle."""

    def check_message(self, session_id: str, user_id: str | UUID | None, text: str) -> None:
        """Raise `InvalidMemoryInputError` if a turn with `text` could not be recorded."""
        ...

    async def get_memory_context(
        self, session_id: str, user_id: str | UUID | None = None, *, query: str | None = None
    ) -> MemoryContext:
        """The session's state and the user's relevant long-term memory."""
        ...

    async def record_exchange(self, session_id: str, user_id: str | UUID | None, prompt: str, answer: str) -> bool:
        """Record the exchange in the session; False (logged, counted) when it could not be."""
        ...

    def extracts_inline(self, choice: bool | None = None) -> bool:
        """Whether an extraction runs before the turn returns."""
        ...

    async def extract_if_due(
        self, session_id: str, user_id: str | UUID, *, end_of_request: bool = False
    ) -> ExtractionRun:
        """Extract now when the policy says one is due."""
        ...

    async def schedule_extraction(
        self, session_id: str, user_id: str | UUID, *, end_of_request: bool = False
    ) -> ScheduledExtraction:
        """Queue an extraction when the policy says one is due."""
        ...

    def run_in_background(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run `work` off the request path."""
        ...

    async def memory_paused(self, user_id: str | UUID) -> bool:
        """Whether the user paused their memory."""
        ...

    async def get_short_term(self, session_id: str, *, user_id: str | UUID | None = None) -> ShortTermMemory:
        """The session's messages, entities and intents."""
        ...

    @property
    def jobs_write_summaries(self) -> bool:
        """Whether a queued extraction job also writes a due rolling summary in its own model call."""
        ...


@dataclass(frozen=True)
class TurnStart:
    """What `Turn.start` read: exactly one of the two is set."""

    context: MemoryContext | None = None
    """Without a context builder: the session's state and the user's long-term memory (`get_memory_context`)."""
    built: AssembledContext | None = None
    """With a context builder: the budgeted context (instructions, per-turn part, history, report)."""
    receipt: ContextReceipt | None = None
    """With a context builder: what the built context holds and why (`ContextBuilder.last_receipt`)."""


@dataclass(frozen=True)
class TurnOutcome:
    """What `Turn.finish` did."""

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


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of `session_id` for `user_id` (None: an anonymous session): `start` before the model call,
    `finish` after it (see the module docstring). Made by `MemoryManager.turn`."""

    memory: TurnMemory
    session_id: str
    user_id: str | UUID | None

    async def start(
        self,
        prompt: str,
        *,
        check: bool = True,
        context: ContextBuilder | None = None,
        history: Sequence[ModelMessage] | None = None,
        prompt_tokens: int | None = None,
        keep_prefix: bool = False,
    ) -> TurnStart:
        """Check the turn (`check`: `MemoryManager.check_message` raises `InvalidMemoryInputError` for bad ids
        or a prompt memory could not store) and read its context: `context`'s budgeted build (`history`: the
        caller's messages, None: the session's; `prompt_tokens`: what the prompt costs of the budget, None: counted
        here as one user request, after the check, so a prompt too long to count is refused, not counted;
        `keep_prefix`: keep the previous request's history start while it fits), else `get_memory_context`
        with `prompt` as the query."""
        memory, session_id, user_id = self.memory, self.session_id, self.user_id
        if check:
            memory.check_message(session_id, user_id, prompt)
        if context is None:
            return TurnStart(context=await memory.get_memory_context(session_id, user_id, query=prompt or None))
        if prompt_tokens is None:
            # Imported here: pydantic-ai is loaded only by a turn with a context builder, not by `import
            # memory_plugin` (tests/test_cli_startup.py keeps the CLI's start light).
            from pydantic_ai.messages import ModelRequest, UserPromptPart

            from ..context.history import message_tokens

            request = ModelRequest(parts=[UserPromptPart(prompt)])
            prompt_tokens = message_tokens(request, context.counter) if prompt else 0
        built = await context.build(
            session_id,
            user_id,
            query=prompt or None,
            history=history,
            prompt_tokens=prompt_tokens,
            keep_prefix=keep_prefix,
        )
        return TurnStart(built=built, receipt=context.last_receipt(session_id, user_id))

    async def finish(
        self,
        *,
        prompt: str | None = None,
        answer: str | None = None,
        extract: bool = True,
        inline: bool | None = None,
        end_of_request: bool = False,
        context: ContextBuilder | None = None,
    ) -> TurnOutcome:
        """End the turn (see the module docstring). `prompt`/`answer`: the exchange to record (None: the caller
        recorded its messages itself). `inline`: extract before returning (True) or queue (False); None: the
        settings' choice. `context`: the builder whose slots and summary follow the turn (patched inline when
        the extraction is, else off the request path). Never raises for memory: see `TurnOutcome`."""
        memory, session_id, user_id = self.memory, self.session_id, self.user_id
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
            update = self._update_context(context, user_id, outcome)
            if now:
                await update
            else:
                # Slots and summary are derived data: off the request path (a summary model call takes seconds).
                memory.run_in_background(update, name="memory_plugin-context-update")
        return outcome

    async def _update_context(self, context: ContextBuilder, user_id: str | UUID, outcome: TurnOutcome) -> None:
        """The slots from the facts an inline extraction stored and those it superseded, and the rolling summary
        if due (unless the extraction's own call writes it). Never raises."""
        memory, session_id = self.memory, self.session_id
        run, scheduled = outcome.extraction, outcome.scheduled
        queued = scheduled is not None and scheduled.job_id is not None and memory.jobs_write_summaries
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
                summary_done=(run is not None and run.summary_asked) or queued,
            )
        except MemoryPluginError as exc:
            logger.warning("%s could not update the slots or the summary after the turn: %s", LOG_PREFIX, exc)
