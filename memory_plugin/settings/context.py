"""What the memory places in an agent's request: facts and their ranking, recent messages, the token budget
(`settings.context`)."""

from __future__ import annotations

from pydantic import Field

from .flat import Flat, SettingsGroup

__all__ = ["ContextNames", "ContextSettings"]


class ContextSettings(SettingsGroup):
    """What an agent's request carries from memory (`settings.context`): facts, their ranking, recent
    messages, the token budget."""

    max_block_chars: int = Field(default=12_000, ge=500)
    """The memory block given to an agent is cut to this many characters, whatever the session holds."""

    max_facts: int = Field(default=12, ge=0)
    """Facts placed in the context per call."""

    max_projects: int = Field(default=3, ge=0)
    """Most recent projects placed in the context."""

    max_patterns: int = Field(default=3, ge=0)
    """Most frequent request patterns placed in the context."""

    max_rejections: int = Field(default=20, ge=0)
    """Current rejections ("never suggest X") placed in the context after the ranked facts, newest first."""

    weight_importance: float = 0.6
    """Ranking weight of importance (1–5, scaled to 0–1)."""

    weight_confidence: float = 0.3
    """Ranking weight of confidence."""

    weight_recency: float = 0.1
    """Ranking weight of recency (1.0 when just reinforced, falling linearly to 0 over `recency_window_days`)."""

    recency_window_days: float = Field(default=30.0, gt=0)
    """Age at which a fact's recency boost reaches zero."""

    recent_messages_in_prompt: int = Field(default=6, ge=0)
    """How many of the session's last messages the memory block repeats for the agent."""

    message_chars_in_prompt: int = Field(default=280, ge=20)
    """Each repeated message is cut to this many characters in the memory block."""

    budget_tokens: int = Field(default=1000, ge=50)
    """Tokens memory and recent history may take together in each request (the current message and the
    agent's own instructions are not counted)."""

    slots_tokens: int = Field(default=250, ge=0)
    """Most the structured slots (goal, constraints, rejections, preferences…) may take."""

    summary_tokens: int = Field(default=600, ge=0)
    """Most the rolling summary may take (a longer summary is cut at a line boundary)."""

    summary_pressure_tokens: int = Field(default=450, ge=0)
    """What the summary is cut to when memory and history do not fit the budget."""

    min_recent_messages: int = Field(default=4, ge=0)
    """Recent messages always sent, whatever the budget (moved back so a tool call keeps its result)."""

    token_model: str | None = None
    """Model whose tokenizer counts the budget (`openai:gpt-4o`…). Unset: `agent_model`; OpenAI models are
    counted exactly offline (o200k_base/cl100k_base), others approximated with o200k_base."""


class ContextNames:
    """The flat names (and `MEMORY_*` variables) of `ContextSettings`' fields."""

    max_memory_block_chars = Flat[int]("context.max_block_chars")
    max_facts_in_context = Flat[int]("context.max_facts")
    max_projects_in_context = Flat[int]("context.max_projects")
    max_patterns_in_context = Flat[int]("context.max_patterns")
    max_rejections_in_context = Flat[int]("context.max_rejections")
    weight_importance = Flat[float]("context.weight_importance")
    weight_confidence = Flat[float]("context.weight_confidence")
    weight_recency = Flat[float]("context.weight_recency")
    recency_window_days = Flat[float]("context.recency_window_days")
    recent_messages_in_prompt = Flat[int]("context.recent_messages_in_prompt")
    message_chars_in_prompt = Flat[int]("context.message_chars_in_prompt")
    context_budget_tokens = Flat[int]("context.budget_tokens")
    context_slots_tokens = Flat[int]("context.slots_tokens")
    context_summary_tokens = Flat[int]("context.summary_tokens")
    context_summary_pressure_tokens = Flat[int]("context.summary_pressure_tokens")
    context_min_recent_messages = Flat[int]("context.min_recent_messages")
    token_model = Flat[str | None]("context.token_model")
