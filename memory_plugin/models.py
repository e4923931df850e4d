"""The plugin's data: messages, facts, preferences, projects, patterns and the context handed to agents.

In pydantic so that bad input fails at the boundary with a clear message and nothing partial is stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self
from uuid import UUID, uuid4

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from .errors import InvalidModelInputError
from .text import unstorable_reason

__all__ = [
    "CleanText",
    "FactCategory",
    "FactSource",
    "LongTermMemory",
    "MemorizedFact",
    "MemoryContext",
    "MemoryModel",
    "MemoryUpdate",
    "Message",
    "ProjectRecord",
    "RequestPattern",
    "Role",
    "ShortTermMemory",
    "StorableTime",
    "UserPreferences",
]

Role = Literal["user", "assistant", "system"]
# fmt: off
FactCategory = Literal[
    "preference", "requirement", "constraint", "feedback",
    "rejection",  # "don't suggest X": always reaches the prompt
    "goal", "routine", "contact", "health_note", "fact",
]
# fmt: on
"""What kind of fact it is (`memory_plugin.taxonomy` describes each)."""
FactSource = Literal["explicit", "inferred"]
"""`explicit`: the user said it; `inferred`: the extractor concluded it."""
CommunicationStyle = Literal["technical", "simple"]


def utc_now() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


def _clean_text(value: str) -> str:
    reason = unstorable_reason(value)
    if reason is not None:
        raise ValueError(f"text {reason}")
    stripped = value.strip()
    if not stripped:
        raise ValueError("text must not be empty or only whitespace")
    return stripped


CleanText = Annotated[str, AfterValidator(_clean_text)]
"""Non-empty text Postgres can store (no NUL, no lone surrogate), stripped of outer whitespace."""


def _storable_time(value: datetime) -> datetime:
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                f"{value.isoformat()} is outside the range memory can store (years 1 to 9999 in UTC)"
            ) from None
    return value


StorableTime = Annotated[datetime, AfterValidator(_storable_time)]
"""A datetime that is still between years 1 and 9999 once in UTC (what Python can read back from Postgres)."""


class MemoryModel(BaseModel):
    """Base of the public models: bad values raise `InvalidModelInputError`, which is both the plugin's
    `InvalidMemoryInputError` and pydantic's `ValidationError` (each field and the reason)."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except InvalidModelInputError:
            raise
        except ValidationError as exc:
            raise InvalidModelInputError.from_exception_data(exc.title, exc.errors()) from None  # type: ignore[arg-type]

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """`BaseModel.model_validate`, raising `InvalidModelInputError`."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except InvalidModelInputError:
            raise
        except ValidationError as exc:
            raise InvalidModelInputError.from_exception_data(exc.title, exc.errors()) from None  # type: ignore[arg-type]


class Message(MemoryModel):
    """One turn of a conversation, kept in short-term memory."""

    model_config = ConfigDict(frozen=True)

    role: Role
    """Who wrote it."""
    content: CleanText
    """What was said."""
    timestamp: StorableTime = Field(default_factory=utc_now)
    """When it was said; relative dates in it are resolved against this."""
    id: str = Field(default_factory=lambda: uuid4().hex)
    """Stable id, recorded as provenance on the facts extracted from this message."""


class MemorizedFact(MemoryModel):
    """A long-term fact about a user, with its owner and provenance.

    `MemorizedFact(content="Prefiere aluminio 7075", category="preference", confidence=0.9, source="explicit")`
    """

    model_config = ConfigDict(frozen=True)

    content: CleanText
    """The fact, as one short sentence."""
    category: FactCategory
    """What kind of fact it is."""
    confidence: float = Field(ge=0.0, le=1.0)
    """How sure we are that it is true and lasting (0–1)."""
    source: FactSource
    """Stated by the user or inferred."""
    id: UUID = Field(default_factory=uuid4)
    """Row id in `user_memory`."""
    timestamp: StorableTime = Field(default_factory=utc_now)
    """When the fact was first learned."""
    relevance_count: int = Field(default=0, ge=0)
    """How many times the fact was stated again after it was first stored (each repeat reinforces it)."""
    user_id: UUID | None = None
    """Owner. Set by the manager on write from `MemoryUpdate.user_id`."""
    source_message_ids: tuple[str, ...] = ()
    """Ids of the messages the fact was extracted from."""
    importance: int = Field(default=3, ge=1, le=5)
    """1 (trivia) to 5 (must never be forgotten); a ranking weight."""
    last_reinforced_at: StorableTime | None = None
    """When the fact was last stated again (None: never repeated)."""
    expires_at: StorableTime | None = None
    """After this the fact is never shown (temporary facts: "trip this weekend")."""
    replaces: UUID | None = None
    """Id of a current fact this one supersedes (the extractor sets it; it is shown the candidate facts)."""
    invalid_at: StorableTime | None = None
    """When it stopped being true; None for a current fact (history queries return the others)."""
    superseded_by: UUID | None = None
    """The fact that replaced it, if any."""
    sensitive: bool = False
    """Stored encrypted (`MemorySettings.encryption_keys`): written with `sensitive=True`, or of one of
    `MemorySettings.sensitive_categories`. Never embedded nor indexed for search (docs/privacy.md)."""


class UserPreferences(MemoryModel):
    """Structured preferences. Stored as one `user_memory` row per value."""

    preferred_materials: list[CleanText] = Field(default_factory=list)
    """Materials the user asks for, most recent first (e.g. "aluminio 7075")."""
    typical_quantities: CleanText | None = None
    """"prototipos", "producción media", "producción alta" or a free description."""
    communication_style: CommunicationStyle | None = None
    """How the user wants answers: technical detail or plain language."""
    industry: CleanText | None = None
    """The user's sector (e.g. "aeroespacial")."""
    location: CleanText | None = None
    """Where the user is (city, region, country)."""

    def is_empty(self) -> bool:
        """True when no preference is known."""
        return not self.preferred_materials and all(
            v is None for v in (self.typical_quantities, self.communication_style, self.industry, self.location)
        )


class ProjectRecord(MemoryModel):
    """One entry of the user's project history (a budget request, an order)."""

    model_config = ConfigDict(frozen=True)

    description: CleanText
    """What was asked for, in one line: "50 soportes en aluminio 7075, anodizado"."""
    materials: tuple[CleanText, ...] = ()
    """Materials involved."""
    quantity: CleanText | None = None
    """Quantity as the user put it."""
    status: CleanText = "requested"
    """Where it stands: requested, quoted, ordered, delivered..."""
    id: UUID = Field(default_factory=uuid4)
    """Row id in `user_memory`."""
    timestamp: StorableTime = Field(default_factory=utc_now)
    """When it was recorded."""
    session_id: str | None = None
    """The session it came from."""


class RequestPattern(MemoryModel):
    """A kind of request the user makes repeatedly ("pide presupuestos de fresado CNC")."""

    model_config = ConfigDict(frozen=True)

    description: CleanText
    """The pattern in one line."""
    occurrences: int = Field(default=1, ge=1)
    """How many times it was observed."""
    last_seen: StorableTime = Field(default_factory=utc_now)
    """When it was last observed."""


class ShortTermMemory(MemoryModel):
    """The session's state: its recent messages, entities and intents (in RAM, Postgres or Redis)."""

    messages: list[Message] = Field(default_factory=list)
    """Last messages, oldest first."""
    entities: dict[str, list[str]] = Field(default_factory=dict)
    """Extracted entities by kind (materials, services, quantity...), de-duplicated."""
    intents: list[str] = Field(default_factory=list)
    """Intents detected in the session, in first-seen order."""


class LongTermMemory(MemoryModel):
    """The user's persisted memory that is relevant now."""

    facts: list[MemorizedFact] = Field(default_factory=list)
    """Most relevant facts, best first."""
    preferences: UserPreferences = Field(default_factory=UserPreferences)
    """Known preferences."""
    projects: list[ProjectRecord] = Field(default_factory=list)
    """Recent projects, newest first."""
    patterns: list[RequestPattern] = Field(default_factory=list)
    """Frequent request patterns, most frequent first."""

    def is_empty(self) -> bool:
        """True when nothing is known about the user."""
        return not (self.facts or self.projects or self.patterns) and self.preferences.is_empty()


class MemoryContext(MemoryModel):
    """Everything the memory knows that matters for the next answer: `get_memory_context`'s result."""

    session_id: str
    """The session this context is for."""
    user_id: UUID | None = None
    """The user, if known (anonymous sessions have short-term memory only)."""
    short_term: ShortTermMemory = Field(default_factory=ShortTermMemory)
    """This session's state."""
    long_term: LongTermMemory = Field(default_factory=LongTermMemory)
    """The user's persisted memory."""
    long_term_available: bool = True
    """False when the long-term store could not be read now; `long_term` is then empty, or the last copy read
    (see `long_term_cached_at`)."""
    long_term_cached_at: StorableTime | None = None
    """When the store could not be read but an earlier read was cached: when that copy was read (UTC), and
    `long_term` holds it (possibly out of date). None otherwise."""
    fact_scores: dict[UUID, dict[str, float]] = Field(default_factory=dict, exclude=True)
    """Why each fact a search chose for the query is here: `score` and the parts it is made of
    (`ScoreComponents`), by fact id. Empty without a query (facts ranked by importance, confidence, recency)."""


class MemoryUpdate(MemoryModel):
    """What to persist for a user after (part of) a conversation: `update_memory`'s argument."""

    user_id: UUID
    """Owner of everything in this update."""
    session_id: str | None = None
    """The session it came from (recorded on every row)."""
    new_facts: list[MemorizedFact] = Field(default_factory=list)
    """Facts to add; repeats of stored facts reinforce them instead of adding rows."""
    preferences: UserPreferences | None = None
    """Preferences to merge into the stored ones (list values are added, single values replaced)."""
    project: ProjectRecord | None = None
    """A project to append to the history."""
    patterns: list[CleanText] = Field(default_factory=list)
    """Request patterns observed; each observation increments the pattern's count."""
