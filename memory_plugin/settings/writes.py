"""What a write may hold and how fast one user may write (`settings.writes`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from ..errors import MemoryPluginError
from ..privacy.health_consent import HealthNotesConsent
from .flat import Flat, SettingsGroup

__all__ = ["WriteNames", "WriteSettings"]


class WriteSettings(SettingsGroup):
    """What a write may hold and how fast one user may write (`settings.writes`)."""

    max_fact_chars: int = Field(default=500, ge=10)
    """Longest extracted fact accepted. Facts are short statements; long text belongs in verbatim notes (see
    `max_note_chars`). At most `max_note_chars`."""

    max_note_chars: int = Field(default=16_000, ge=10)
    """Longest verbatim note accepted (a message someone wrote, stored by `remember`/`remember_many` or an
    import): message-sized, because ~2 % of everyday chat turns are longer than 500 characters and the longest
    seen reach ~2,000. Must not exceed the schema's `user_memory.content` length check (checked at start-up by
    `check_content_limit`)."""

    health_notes: HealthNotesConsent = "off"
    """What may be kept of health statements (`memory_plugin.privacy.HealthNotesConsent`): ``"off"`` (default)
    replaces the speaker's own clinical detail in notes with ``[health detail]`` and reduces clinical facts to
    a non-clinical `health_note` or drops them; ``"keep_notes"``, for deployments with the user's explicit
    consent, also keeps non-clinical health notes where a note would otherwise be dropped. Raw clinical detail
    (diagnosis, medication, dose, test result) is never stored in either mode."""

    rate_per_second: float = Field(default=100.0, ge=0)
    """Items (facts, notes, preferences…) one user may write per second once `write_burst` is spent; a write
    over the limit raises `MemoryLimitError` with `retry_after`. 0 turns the limit off. 100/s is far above what
    a conversation produces and far below what one user needs to slow everyone else down (a flood of 100,000
    facts in 65 s doubled a neighbour's write p50)."""

    max_facts_per_user: int = Field(default=200_000, ge=1)
    """Fact rows (current and history) one user may have; a write that would pass it raises `MemoryLimitError`
    and writes nothing. 200,000 is twice the largest history the benchmarks measure; a person's conversations
    produce a few thousand. Checked against a count read once per user and process, kept up to date by this
    process's writes and read again near the limit (other processes' writes are seen then)."""

    burst: int = Field(default=10_000, ge=1)
    """Items one user may write at once (an import of a long history: a LoCoMo conversation is ~700 turns)."""

    min_fact_confidence: float = Field(default=0.6, ge=0, le=1)
    """Facts below this confidence are never stored."""

    reinforcement_step: float = Field(default=0.1, ge=0, le=1)
    """Confidence added when a stored fact is stated again (bounded by 1.0)."""

    @model_validator(mode="after")
    def _fact_limit_within_note_limit(self) -> WriteSettings:
        if self.max_fact_chars > self.max_note_chars:
            raise ValueError(
                f"max_fact_chars ({self.max_fact_chars}) is larger than max_note_chars ({self.max_note_chars}): "
                "an extracted fact is a short statement drawn from a note; raise MEMORY_MAX_NOTE_CHARS or lower "
                "MEMORY_MAX_FACT_CHARS"
            )
        return self

    def check_content_limit(self, schema_max_chars: int) -> None:
        """Raise `MemoryPluginError` when the text limits exceed what the schema stores.

        `schema_max_chars` is the upper bound of the `user_memory.content` length check of the connected
        database; call this at start-up so a too-long note fails there, with this message, instead of as a
        `StoreError` inside Postgres for a whole batch."""
        for name, value in (("max_note_chars", self.max_note_chars), ("max_fact_chars", self.max_fact_chars)):
            if value > schema_max_chars:
                raise MemoryPluginError(
                    f"{name} is {value} characters but the database stores at most {schema_max_chars} per memory "
                    f"(the user_memory.content check): set MEMORY_{name.upper()}={schema_max_chars} or less, or "
                    "apply the migration that raises the check"
                )


class WriteNames:
    """The flat names (and `MEMORY_*` variables) of `WriteSettings`' fields."""

    max_fact_chars = Flat[int]("writes.max_fact_chars")
    max_note_chars = Flat[int]("writes.max_note_chars")
    health_notes = Flat[HealthNotesConsent]("writes.health_notes")
    write_rate_per_second = Flat[float]("writes.rate_per_second")
    max_facts_per_user = Flat[int]("writes.max_facts_per_user")
    write_burst = Flat[int]("writes.burst")
    min_fact_confidence = Flat[float]("writes.min_fact_confidence")
    reinforcement_step = Flat[float]("writes.reinforcement_step")
