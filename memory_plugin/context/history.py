"""The conversation as pydantic-ai messages: conversion, token counts, safe cut points and compaction.

History stays structured (a tool call and its result are parts of messages, not prose), and is only ever
cut where no tool call is waiting for its result: before a `ModelRequest` that starts a user turn with
every earlier call answered. Cutting anywhere else leaves a `tool_result` whose `tool_use` is gone (or a
call without result), which providers reject with a 400.

Compaction follows pydantic-ai's convention for a summary the application writes: a `CompactionPart`
(without provider fields) at the start of a `ModelRequest`; every provider sends it as user-voice text
framed as a summary written by a separate model. The rolling summary is that summary, so compaction within
a run and rehydration in a new process hand the model the same digest.

pydantic-ai-harness's `SummarizingCompaction` / `SlidingWindowCompaction` do the same job, but each harness
release pins `pydantic-ai-slim` to one exact version; a library that depended on it would force that core
version on its users. So this module follows the harness's design (request-side `CompactionPart`, cut
points at user turns) in about a hundred lines of its own, with no dependency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..models import Message
from .tokens import TokenCounter

__all__ = [
    "COMPACTION_MARK",
    "MESSAGE_OVERHEAD_TOKENS",
    "clamp_history",
    "compact_history",
    "cut_points",
    "history_tokens",
    "message_time",
    "message_tokens",
    "messages_for_request",
    "messages_from_session",
    "part_text",
    "rehydrated_history",
    "safe_cuts",
]

MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens a chat API adds around each message (role and separators: 3-4 on OpenAI's chat format)."""
COMPACTION_MARK = "memory_plugin.rolling_summary"
"""`CompactionPart.metadata` key marking the summaries this package writes (not sent to the model)."""


def messages_from_session(messages: Sequence[Message]) -> list[ModelMessage]:
    """Session messages as pydantic-ai messages: user -> `ModelRequest`, assistant -> `ModelResponse`.

    System messages are left out: instructions travel apart, never inside the history."""
    converted: list[ModelMessage] = []
    for m in messages:
        if m.role == "user":
            converted.append(ModelRequest(parts=[UserPromptPart(m.content, timestamp=m.timestamp)]))
        elif m.role == "assistant":
            converted.append(ModelResponse(parts=[TextPart(m.content)], timestamp=m.timestamp))
    return converted


def part_text(part: object) -> str:
    """The text a part sends (a tool call as its name and arguments, a tool return as its name and result)."""
    if isinstance(part, UserPromptPart):
        return (
            part.content if isinstance(part.content, str) else " ".join(c for c in part.content if isinstance(c, str))
        )
    if isinstance(part, TextPart | ThinkingPart | SystemPromptPart):
        return part.content
    if isinstance(part, CompactionPart):
        return part.content or ""
    if isinstance(part, ToolCallPart):
        return f"{part.tool_name} {part.args_as_json_str()}"
    if isinstance(part, ToolReturnPart):
        return f"{part.tool_name} {part.model_response_str()}"
    if isinstance(part, RetryPromptPart):
        return part.model_response()
    return ""


def message_time(message: ModelMessage) -> datetime | None:
    """When a message was made: a response's timestamp, a request's or its first timestamped part's."""
    if isinstance(message, ModelResponse):
        return message.timestamp
    if message.timestamp is not None:
        return message.timestamp
    return next((p.timestamp for p in message.parts if isinstance(p, UserPromptPart | ToolReturnPart)), None)


def message_tokens(message: ModelMessage, counter: TokenCounter) -> int:
    """Tokens `message` costs in a request: its parts' text plus the per-message overhead."""
    return MESSAGE_OVERHEAD_TOKENS + sum(counter.count(part_text(p)) for p in message.parts)


def history_tokens(messages: Sequence[ModelMessage], counter: TokenCounter) -> int:
    """Tokens of a whole history."""
    return sum(message_tokens(m, counter) for m in messages)


def _starts_user_turn(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and not any(
        isinstance(p, ToolReturnPart | RetryPromptPart) for p in message.parts
    )


def safe_cuts(messages: Sequence[ModelMessage]) -> list[int]:
    """Indexes `i` (0 < i < len) where cutting before `messages[i]` separates no tool call from its result
    (a tool return or a retry prompt). A native (server-side) tool's call and return sit in one response,
    never split."""
    cuts: list[int] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if index and not open_calls:
            cuts.append(index)
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                open_calls.add(part.tool_call_id)
            elif isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_call_id:
                open_calls.discard(part.tool_call_id)
    return cuts


def cut_points(messages: Sequence[ModelMessage]) -> list[int]:
    """Indexes where the history may start: a `ModelRequest` with no tool result in it, every tool call
    before it answered. Index 0 is always one; `len(messages)` (nothing kept) is not listed."""
    return [0, *(i for i in safe_cuts(messages) if _starts_user_turn(messages[i]))]


def clamp_history(
    messages: Sequence[ModelMessage], counter: TokenCounter, *, max_tokens: int, min_messages: int = 4
) -> list[ModelMessage]:
    """The longest suffix of `messages` that starts at a cut point and fits `max_tokens`, but never fewer
    than the last `min_messages` (moved back to the cut point before them, so no tool pair is split)."""
    if not messages:
        return []
    points = cut_points(messages)
    need = max(0, len(messages) - min_messages)
    # The latest cut point at or before the first message that must be kept.
    floor = max((p for p in points if p <= need), default=0)
    allowed = {p for p in points if p <= floor}
    # Walk back from the newest message: only the messages that fit (and one more) are counted.
    start, total = floor, 0
    for index in range(len(messages) - 1, -1, -1):
        total += message_tokens(messages[index], counter)
        if total > max_tokens:
            break
        if index in allowed:
            start = index
    return list(messages[start:])


def summary_request(summary: str) -> ModelRequest:
    """The rolling summary as pydantic-ai's application-written compaction: a `CompactionPart` in a request."""
    return ModelRequest(parts=[CompactionPart(summary, metadata={COMPACTION_MARK: True})])


def compact_history(
    messages: Sequence[ModelMessage],
    summary: str | None,
    counter: TokenCounter,
    *,
    max_tokens: int,
    min_messages: int = 4,
) -> list[ModelMessage]:
    """`messages` within `max_tokens`: the recent suffix that fits (cut at a safe point), preceded by
    `summary` as a `CompactionPart` when anything was dropped. Earlier compaction parts this package wrote
    are dropped with the messages they summarised; the new summary replaces them. Unchanged when it fits."""
    if history_tokens(messages, counter) <= max_tokens:
        return list(messages)
    head = [summary_request(summary)] if summary else []
    room = max_tokens - history_tokens(head, counter)
    kept = [
        _without_own_compaction(m) for m in clamp_history(messages, counter, max_tokens=room, min_messages=min_messages)
    ]
    return [*head, *(m for m in kept if m.parts)]


def _without_own_compaction(message: ModelMessage) -> ModelMessage:
    if not isinstance(message, ModelRequest):
        return message
    parts = [
        p for p in message.parts if not (isinstance(p, CompactionPart) and (p.metadata or {}).get(COMPACTION_MARK))
    ]
    return message if len(parts) == len(message.parts) else replace(message, parts=parts)


def rehydrated_history(
    session: Sequence[Message], counter: TokenCounter, *, max_tokens: int, min_messages: int = 4
) -> list[ModelMessage]:
    """A session's stored messages as the clamped history a new process resumes with."""
    return clamp_history(messages_from_session(session), counter, max_tokens=max_tokens, min_messages=min_messages)


def messages_for_request(
    sent: Sequence[ModelMessage],
    *,
    first_request: bool,
    history: Sequence[ModelMessage],
    given: int,
    summary: str | None,
    counter: TokenCounter,
    max_tokens: int,
    min_messages: int = 4,
) -> list[ModelMessage]:
    """What a capability's `before_model_request` sends instead of `sent` (the run's messages).

    On the run's first request: `history` (the assembled, clamped history) in place of the `given`
    messages the caller passed as `message_history` (0 when none: the session's history is added), then
    the new prompt. On later requests of the same run (tool calls): the messages compacted to `max_tokens`
    with `summary` as a `CompactionPart` when anything had to go. The run's own messages are not changed."""
    if first_request:
        return [*history, *sent[given:]]
    return compact_history(sent, summary, counter, max_tokens=max_tokens, min_messages=min_messages)
