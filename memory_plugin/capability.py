"""`MemoryCapability`: the dependency hook that gives a pydantic-ai agent its memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import AbstractToolset

from .errors import InvalidMemoryInputError, MemoryPluginError
from .logs import LOG_PREFIX, logger
from .manager import MemoryManager

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


@dataclass
class MemoryCapability(AbstractCapability[AgentDepsT]):
    """Gives an agent conversational memory: what the user said before, in this session and past ones.

    For each run it reads `session_id`/`user_id` from the run's deps, puts the fenced memory block in the
    agent's instructions, and after the run records the user prompt and the final answer in short-term
    memory; when the extraction policy says so (a memory instruction such as "recuerda…", or every N user
    messages) it then queues the extraction of long-term facts (one batched call, run by a background worker:
    the answer never waits for it; `extract_inline=True` waits, as before).

        Agent(model, deps_type=MemoryDeps, capabilities=[MemoryCapability(memory)])
    """

    memory: MemoryManager
    """The manager whose memory the agent uses."""
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
    _block: str = field(default="", init=False, repr=False)
    """This run's rendered memory block."""

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> MemoryCapability[AgentDepsT]:
        """Check the turn and load the memory for this run's session and user into a per-run copy: before the
        model is called, so a turn memory would refuse (bad ids, a prompt too long or with NUL) costs no
        model call."""
        identity = _identity(ctx.deps)
        prompt = _prompt_text(ctx.prompt)
        if self.record_messages:
            self.memory.check_message(identity.session_id, identity.user_id, prompt)
        context = await self.memory.get_memory_context(identity.session_id, identity.user_id, query=prompt or None)
        run = replace(self)
        run._block = self.memory.format_memory_for_agent(context)
        return run

    def get_instructions(self) -> str | None:
        """The memory block, placed in the instructions (None when nothing is remembered yet)."""
        return self._block or None

    def get_toolset(self) -> AbstractToolset[AgentDepsT] | None:
        """The memory tools, when `tools=True`."""
        if not self.tools:
            return None
        from .tools import memory_toolset

        toolset: AbstractToolset[AgentDepsT] = memory_toolset(self.memory)
        return toolset

    async def after_run(self, ctx: RunContext[AgentDepsT], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        """Record the exchange in short-term memory and queue (or run, inline) extraction on the cadence."""
        if not self.record_messages:
            return result
        identity = _identity(ctx.deps)
        answer = result.output if isinstance(result.output, str) else ""
        # Never raises for memory: the answer is produced, and losing it now would cost the user the model call.
        await self.memory.record_exchange(identity.session_id, identity.user_id, _prompt_text(ctx.prompt), answer)
        if self.extract_facts and identity.user_id is not None:
            inline = self.extract_inline
            if inline is None:
                inline = not self.memory.settings.background_extraction
            try:
                # The extraction policy decides: an explicit memory instruction, or the cadence of user
                # messages; one batched call covers everything not extracted yet.
                if inline:
                    await self.memory.extract_if_due(identity.session_id, identity.user_id)
                else:
                    await self.memory.schedule_extraction(identity.session_id, identity.user_id)
            except MemoryPluginError as exc:
                # The answer is already produced; failing the run now would lose it. Report instead.
                logger.warning("%s could not store facts after the run: %s", LOG_PREFIX, exc)
        return result

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not spec-serializable: it holds a live `MemoryManager`."""
        return None
