"""Which LLM the shop's agents use, and small helpers shared by the offline (deterministic) models.

`resolve_agent_model` answers "real model or offline?" in one place, so the workflow, the CLI and tests
agree: a configured `MEMORY_AGENT_MODEL` wins, an `OPENAI_API_KEY` alone means `openai:gpt-4o-mini`, and
nothing configured means the offline `FunctionModel`s (the demo and the tests never need a network).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

if TYPE_CHECKING:
    from memory_plugin.settings import MemorySettings

__all__ = ["DEFAULT_OPENAI_MODEL", "last_user_prompt", "resolve_agent_model"]

DEFAULT_OPENAI_MODEL = "openai:gpt-4o-mini"
"""The model used when only `OPENAI_API_KEY` is set."""


def resolve_agent_model(settings: MemorySettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The pydantic-ai model name for the agents, or None to use the offline models.

    `settings.agent_model` (`MEMORY_AGENT_MODEL`) first; else `openai:gpt-4o-mini` when `OPENAI_API_KEY` is
    set in `environ` (the process environment by default); else None.
    """
    if settings.agent_model:
        return settings.agent_model
    env = os.environ if environ is None else environ
    return DEFAULT_OPENAI_MODEL if env.get("OPENAI_API_KEY") else None


def last_user_prompt(messages: Sequence[ModelMessage]) -> str:
    """The text of the most recent user prompt in a model request history ("" when there is none)."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart):
                if isinstance(part.content, str):
                    return part.content
                return "\n".join(item for item in part.content if isinstance(item, str))
    return ""
