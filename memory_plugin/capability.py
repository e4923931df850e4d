"""`MemoryCapability`: the dependency hook that gives a pydantic-ai agent its memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from opentelemetry import trace
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.messages import InstructionPart, ModelMessage, ModelRequest, SystemPromptPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import AbstractToolset

from .context.budget import ContextReport
from .context.builder import ContextBuilder
from .context.history import messages_for_request, summary_request
from .context.receipt import ContextReceipt
from .errors import InvalidMemoryInputError
from .lifetime import ManagerLifetime, ManagerOpener
from .manager import MemoryManager
from .settings import MemorySettings

__all__ = ["MemoryCapability", "MemoryDeps", "MemoryIdentity"]


@runtime_checkable
class MemoryIdentity(Protocol):
    """What the capability reads from a run's deps: any object with these two attributes works."""

    session_id: str
    user_id: str | UUID | None


@dataclass
class MemoryDeps:
    """Ready-made deps for an agent with memory. Subclass it to add your own dependencies."""

    session_id: str
    """The conversation (short-term memory is per session)."""
    user_id: str | UUID | None = None
    """The user (long-term memory is per user); None for an anonymous session."""
    receipt: ContextReceipt | None = field(default=None, compare=False)
    """Set by `MemoryCapability` for each run: what the turn's context held and why (`ContextReceipt`)."""


def _identity(deps: object) -> MemoryIdentity:
    if not isinstance(deps, MemoryIdentity):
        raise InvalidMemoryInputError(
            "MemoryCapability needs run deps with `session_id` and `user_id` attributes, "
            f"e.g. agent.run(prompt, deps=MemoryDeps(session_id=..., user_id=...)); got {type(deps).__name__}"
        )
    return deps


def _prompt_text(prompt: str | Sequence[Any] | None) -> str:
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(part for part in prompt if isinstance(part, str))


MEMORY_PART_MARK = "memory_plugin.turn_memory"
"""`SystemPromptPart.metadata` key of the per-turn memory part (not sent to the model)."""


def _with_turn_memory(messages: list[ModelMessage], text: str) -> list[ModelMessage]:
    """`messages` with `text` as a request-scoped system part at the end of the last request (a copy: the run's
    history is not changed, and the next request no longer carries it)."""
    if not text:
        return messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelRequest):
            part = SystemPromptPart(text, scope="request", metadata={MEMORY_PART_MARK: True})
            return [*messages[:index], replace(message, parts=[*message.parts, part]), *messages[index + 1 :]]
    return messages


@dataclass
class MemoryCapability(AbstractCapability[AgentDepsT]):
    """Gives an agent conversational memory: what the user said before, in this session and past ones.

    For each run it reads `session_id`/`user_id` from the run's deps and spends one token budget (the
    manager's `context_builder`) on what the model is given: what lasts (profile, slots with preferences,
    constraints, rejections, decisions, who the user is) in the instructions, which stay byte-identical while
    none of it changes (the provider's prompt cache holds them); the rolling summary as the compaction that
    leads the history (kept while the history grows append-only); the recent exchange as pydantic-ai
    messages; the facts a search chose for this message as a request-scoped system part at the end of the
    request. After the run it records the user prompt and the final answer in short-term memory;
    when the extraction policy says so (a memory instruction such as "recuerda…", or every N user messages)
    it queues the extraction of long-term facts (the answer never waits for it; `extract_inline=True` waits),
    and keeps the slots and the rolling summary current. Each run's `ContextReceipt` is set on the deps
    (`MemoryDeps.receipt`) and kept by the manager (`last_receipt`).

        Agent(model, deps_type=MemoryDeps, capabilities=[MemoryCapability(memory)])
        Agent(model, deps_type=MemoryDeps, capabilities=[MemoryCapability.from_settings()])  # opens its own
    """

    memory: MemoryManager | None = None
    """The manager whose memory the agent uses (None with `from_settings`: opened on first use)."""
    _: KW_ONLY
    record_messages: bool = True
    """Record the user prompt and the final text answer in the session after each run."""
    extract_facts: bool = True
    """After recording, extract and store long-term facts when the extraction policy says so
    (`MemoryManager.schedule_extraction`, or `extract_if_due` when inline)."""
    extract_inline: bool | None = None
    """True: extract before the run returns (the answer waits for the extraction model; the facts are visible
    to the next turn at once). False: queue it for the background worker. None: `not
    settings.background_extraction` (queued by default)."""
    tools: bool = False
    """Also give the model tools to search, add and delete the user's memories (`memory_toolset`)."""
    id: str | None = "memory"
    """One memory per agent by default; pass another id to combine two managers."""
    context: ContextBuilder | None = None
    """Another context builder than the manager's own (`MemoryManager.context_builder`), e.g. one with a
    summary model of its own: `await ContextBuilder.open(memory, settings, database_url=memory.database_url)`.
    None: the manager's."""
    memory_block: bool = False
    """True: the earlier, unbudgeted behaviour: one memory block in the instructions (facts and the session's
    recent messages as text, `format_memory_for_agent`), the caller's history sent as it is, no slots or
    summary. For agents that manage their own history."""
    _opener: ManagerOpener | None = field(default=None, repr=False)
    """Opens the manager from settings (`from_settings`)."""
    _history: list[ModelMessage] = field(default_factory=list, init=False, repr=False)
    """This run's assembled history."""
    _given: int = field(default=0, init=False, repr=False)
    """How many messages the caller passed as `message_history`."""
    _summary: str | None = field(default=None, init=False, repr=False)
    """The rolling summary compaction hands over."""
    _report: ContextReport | None = field(default=None, init=False, repr=False)
    """How this run's budget was spent."""
    _block: str = field(default="", init=False, repr=False)
    """This run's instructions block (what lasts)."""
    _turn: str = field(default="", init=False, repr=False)
    """This run's per-turn memory (a request-scoped system part)."""
    _builder: ContextBuilder | None = field(default=None, init=False, repr=False)
    """This run's context builder."""

    @classmethod
    def from_settings(cls, settings: MemorySettings | None = None, **options: Any) -> MemoryCapability[Any]:
        """A capability that opens its own `MemoryManager` from `settings` (default: the environment) on
        first use and closes it when the agent's `async with agent:` block ends (without one, each run opens
        and closes it). `options` are the other fields (`extract_inline`, `record_messages`…); `tools=True`
        needs a manager you open: `MemoryCapability(memory, tools=True)`."""
        if options.get("tools"):
            raise InvalidMemoryInputError(
                "MemoryCapability.from_settings(tools=True) is not supported: open the manager yourself"
                " (async with MemoryManager.open(settings) as memory) and pass MemoryCapability(memory, tools=True)"
            )
        return cls(None, _opener=ManagerOpener(settings), **options)

    def _manager(self) -> MemoryManager:
        if self.memory is None:
            raise InvalidMemoryInputError("MemoryCapability has no manager: pass one, or use from_settings()")
        return self.memory

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> MemoryCapability[AgentDepsT]:
        """Check the turn and load the memory for this run's session and user into a per-run copy: before the
        model is called, so a turn memory would refuse (bad ids, a prompt too long or with NUL) costs no
        model call."""
        identity = _identity(ctx.deps)
        prompt = _prompt_text(ctx.prompt)
        run = replace(self)
        if self._opener is not None:
            run.memory = await self._opener.manager()
        memory = run._manager()
        turn = memory.turn(identity.session_id, identity.user_id)
        if self.memory_block:
            start = await turn.start(prompt, check=self.record_messages)
            run._block = memory.format_memory_for_agent(start.context) if start.context is not None else ""
            return run
        builder = run._builder = self.context or await memory.context_builder()
        if self.context is not None:
            # Facts a background job writes later patch the slots too, and a summary due on an extraction
            # turn is written in the extraction's own model call.
            memory.keep_context_current(self.context)
        # At this point ctx.messages holds the caller's message_history only (the prompt comes later).
        start = await turn.start(
            prompt,
            check=self.record_messages,
            context=builder,
            history=list(ctx.messages) or None,
            keep_prefix=True,
        )
        assert start.built is not None  # a turn started with a context builder reads the budgeted context
        built = start.built
        # The rolling summary leads the history (pydantic-ai's application-written compaction): it changes only
        # when the history restarts, so the instructions before it stay cached when it is rewritten.
        head = [summary_request(built.summary_block)] if built.summary_block else []
        run._block, run._turn, run._given = built.standing, built.turn, len(ctx.messages)
        run._history = [*head, *built.history]
        run._summary, run._report = built.summary, built.report
        if hasattr(ctx.deps, "receipt"):  # MemoryDeps and its subclasses: the application reads it after the run
            setattr(ctx.deps, "receipt", builder.last_receipt(identity.session_id, identity.user_id))  # noqa: B010
        return run

    def get_instructions(self) -> InstructionPart | None:
        """What lasts, fenced, in the instructions (None when nothing is remembered yet). Marked `dynamic`: it is
        the user's and changes when a fact does, so providers with explicit cache points (pydantic-ai's
        `Caching`) end the prefix every conversation shares after the agent's own instructions, before it."""
        return InstructionPart(self._block, dynamic=True) if self._block else None

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """The budget report on the agent run's span (`memory.context.*`; instrumentation is the outermost
        capability, so its run span is current here)."""
        if self._report is not None:
            trace.get_current_span().set_attributes(self._report.as_attributes())
        return await handler()

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """The assembled history on the first request, compaction on the later ones; the per-turn memory as a
        request-scoped system part on each."""
        if self._builder is None:
            return request_context
        messages = messages_for_request(
            request_context.messages,
            first_request=ctx.run_step <= 1,
            history=self._history,
            given=self._given,
            summary=self._summary,
            counter=self._builder.counter,
            max_tokens=self._builder.budget.total_tokens,
            min_messages=self._builder.budget.min_recent_messages,
        )
        request_context.messages = _with_turn_memory(messages, self._turn)
        return request_context

    def get_toolset(self) -> AbstractToolset[AgentDepsT] | None:
        """The memory tools, when `tools=True`; with `from_settings`, the toolset that ties the manager's
        lifetime to the agent's."""
        if self._opener is not None:
            lifetime: AbstractToolset[AgentDepsT] = ManagerLifetime(self._opener)
            return lifetime
        if not self.tools:
            return None
        from .tools import memory_toolset

        toolset: AbstractToolset[AgentDepsT] = memory_toolset(self._manager())
        return toolset

    async def after_run(self, ctx: RunContext[AgentDepsT], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        """Record the exchange in short-term memory and queue (or run, inline) extraction on the cadence."""
        if not self.record_messages:
            return result
        memory = self._manager()
        identity = _identity(ctx.deps)
        answer = result.output if isinstance(result.output, str) else ""
        # Never raises for memory: the answer is produced, and losing it now would cost the user the model call.
        await memory.turn(identity.session_id, identity.user_id).finish(
            prompt=_prompt_text(ctx.prompt),
            answer=answer,
            extract=self.extract_facts,
            inline=self.extract_inline,
            context=self._builder,
        )
        return result

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not spec-serializable: it holds a live `MemoryManager`."""
        return None
