"""The rolling summary of a conversation and the chats' summaries (`settings.summary`)."""

from __future__ import annotations

from pydantic import Field

from .flat import Flat, SettingsGroup

__all__ = ["SummaryNames", "SummarySettings"]


class SummarySettings(SettingsGroup):
    """The rolling summary of a conversation and the chats' summaries and titles (`settings.summary`)."""

    model: str | None = None
    """pydantic-ai model that writes the rolling summary. Unset: `extraction_model`; neither: an extractive
    summary built offline (it says it is one)."""

    min_new_chars: int = Field(default=600, ge=1)
    """Rewrite the summary when the messages since its last version hold more than this many characters."""

    every_n_messages: int = Field(default=8, ge=1)
    """Rewrite the summary every this many messages (user and assistant)."""

    on_topic_change: bool = True
    """Rewrite the summary when the user changes the subject ("cambiando de tema", "another thing"…)."""

    on_decision: bool = True
    """Rewrite the summary when the user decides or rejects something ("vamos con…", "no me sugieras…")."""

    with_extraction: bool = True
    """Rewrite the summary only on turns where a fact extraction runs, in the extraction's own model call with
    an LLM extractor (the summary's triggers then wait for the extraction's cadence or memory instructions: on
    a 300-turn conversation 0.25 model calls per user turn instead of 0.40, the summary at most 5 turns old).
    False: the summary also has its own calls on its own triggers."""

    resync_days: float = Field(default=7.0, gt=0)
    """Rebuild the summary from the user's current facts when its last rebuild is this old."""

    chat_model: str | None = None
    """pydantic-ai model writing chat summaries and titles (e.g. "openai:gpt-4o-mini"); unset: the offline
    extractive summary."""


class SummaryNames:
    """The flat names (and `MEMORY_*` variables) of `SummarySettings`' fields."""

    summary_model = Flat[str | None]("summary.model")
    summary_min_new_chars = Flat[int]("summary.min_new_chars")
    summary_every_n_messages = Flat[int]("summary.every_n_messages")
    summary_on_topic_change = Flat[bool]("summary.on_topic_change")
    summary_on_decision = Flat[bool]("summary.on_decision")
    summary_with_extraction = Flat[bool]("summary.with_extraction")
    summary_resync_days = Flat[float]("summary.resync_days")
    chat_summary_model = Flat[str | None]("summary.chat_model")
