"""Where to cut a model-visible history, and the summary turn that replaces the part before the cut.

Rules: nothing happens while the history has at most `window` turns (messages); beyond, every turn before the
cut becomes one `ModelRequest` holding a `CompactionPart` (the summary), and the `keep_min..keep_max` newest
turns stay as they are. A cut never separates a tool call from its result: it is placed before a request that
starts a user turn when one exists in the range, and in any case only where no tool call before it has its
result after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import (
    BaseToolCallPart,
    CompactionPart,
    ModelMessage,
    ModelRequest,
    SystemPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..context.history import safe_cuts

__all__ = ["CompactionPolicy", "choose_cut", "is_summary_turn", "summary_turn", "turn_text"]

SUMMARY_MARKER = "memory_plugin.chat_summary"
"""`CompactionPart.metadata` key marking the summaries this package writes."""


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When and how much to compact: beyond `window` turns, keep the newest `keep_min..keep_max` (aim `keep`)."""

    window: int = 30
    keep_min: int = 10
    keep_max: int = 15
    keep: int = 12


def _has_user_prompt(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)


def choose_cut(history: Sequence[ModelMessage], policy: CompactionPolicy) -> int | None:
    """How many of the oldest turns to replace by a summary, or None when nothing should happen."""
    size = len(history)
    if size <= policy.window:
        return None
    safe = [i for i in safe_cuts(history) if i >= 2]  # replacing one turn by one summary gains nothing
    in_range = [i for i in safe if policy.keep_min <= size - i <= policy.keep_max]
    preferred = [i for i in in_range if _has_user_prompt(history[i])] or in_range
    if preferred:
        return min(preferred, key=lambda i: abs((size - i) - policy.keep))
    # A long tool exchange covers the whole range: keep more (never fewer than keep_min) rather than split it.
    longer = [i for i in safe if size - i > policy.keep_max]
    return max(longer) if longer else None


def is_summary_turn(message: ModelMessage) -> bool:
    """Whether `message` is a summary this package wrote."""
    return isinstance(message, ModelRequest) and any(
        isinstance(p, CompactionPart) and (p.metadata or {}).get(SUMMARY_MARKER) for p in message.parts
    )


def summary_turn(text: str, replaced: int) -> ModelRequest:
    """The request that stands for `replaced` earlier turns."""
    return ModelRequest(parts=[CompactionPart(content=text, metadata={SUMMARY_MARKER: True, "replaced": replaced})])


def turn_text(message: ModelMessage) -> str:
    """A plain-text line for a turn, as a summariser reads it ("user: …", "assistant: …", "tool x: …")."""
    lines = []
    for part in message.parts:
        if isinstance(part, UserPromptPart) and isinstance(part.content, str):
            lines.append(f"user: {part.content}")
        elif isinstance(part, SystemPromptPart):
            continue  # the instructions are not the conversation
        elif isinstance(part, CompactionPart) and part.content:
            lines.append(f"summary: {part.content}")
        elif isinstance(part, ToolReturnPart):
            lines.append(f"tool {part.tool_name}: {part.model_response_str()[:300]}")
        elif isinstance(part, TextPart):
            lines.append(f"assistant: {part.content}")
        elif isinstance(part, BaseToolCallPart):
            lines.append(f"assistant calls {part.tool_name}({part.args_as_json_str()[:200]})")
    return "\n".join(lines)
