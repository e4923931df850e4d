"""Fact extraction: which model, and when it runs (`settings.extraction`)."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from .flat import Flat, SettingsGroup

__all__ = ["ExtractionNames", "ExtractionSettings"]


class ExtractionSettings(SettingsGroup):
    """Fact extraction (`settings.extraction`): the model, its cadence and triggers, the calendar."""

    model: str | None = None
    """pydantic-ai model name for fact extraction, e.g. `openai:gpt-4o-mini`. Unset: the offline rule-based
    extractor (Spanish and English explicit statements)."""

    agent_model: str | None = None
    """pydantic-ai model for the demo agents (classifier, budget agent). Unset: deterministic offline models."""

    every_n_messages: int = Field(default=4, ge=1)
    """Cadence: extract once this many *user* messages with content are waiting in a session (the
    assistant's answers go along as context; small talk does not count). One call covers every message not
    extracted yet. See `memory_plugin.extraction.policy`."""

    on_explicit_triggers: bool = True
    """Extract at once when the user gives a memory instruction ("recuerda…", "remember…", "no me
    sugieras…", "don't suggest…", "ya no…", "from now on", "a partir de ahora"…)."""

    at_end_of_request: bool = True
    """Extract when a request is complete (the budget-request workflow says so when the user confirms)."""

    candidate_facts: int = Field(default=30, ge=0)
    """How many of the user's current facts (best-ranked first) the extractor is shown, with their ids, so that
    a new fact can name the one it replaces ("the budget is now 2000 €") and a restated fact can reuse the
    stored wording. 0: none."""

    date_timezone: str | None = None
    """IANA timezone (e.g. `Europe/Madrid`) in which relative dates in facts ("mañana", "next Friday") are
    resolved: the users' local calendar. Unset: the message timestamp's own timezone (UTC for messages
    created without one), so "mañana" said at 23:30 in Madrid would be counted from the UTC date."""

    extra_triggers: list[str] = Field(default_factory=list)
    """More phrases that trigger an immediate extraction (case- and accent-insensitive substrings); from the
    environment as a JSON list: `MEMORY_EXTRACTION_EXTRA_TRIGGERS='["anota que"]'`."""

    @field_validator("date_timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown timezone {value!r}; use an IANA name such as 'Europe/Madrid'") from exc
        return value


class ExtractionNames:
    """The flat names (and `MEMORY_*` variables) of `ExtractionSettings`' fields."""

    extraction_model = Flat[str | None]("extraction.model")
    agent_model = Flat[str | None]("extraction.agent_model")
    extract_every_n_messages = Flat[int]("extraction.every_n_messages")
    extract_on_explicit_triggers = Flat[bool]("extraction.on_explicit_triggers")
    extract_at_end_of_request = Flat[bool]("extraction.at_end_of_request")
    extraction_candidate_facts = Flat[int]("extraction.candidate_facts")
    date_timezone = Flat[str | None]("extraction.date_timezone")
    extraction_extra_triggers = Flat[list[str]]("extraction.extra_triggers")
