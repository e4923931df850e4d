"""`LLMExtractor`: fact extraction through a pydantic-ai `Agent` with structured output.

The model returns an `ExtractionReport` whose items use loose types, so one bad item (an unknown category, a
confidence of 1.7) does not make pydantic-ai reject and retry the whole answer. Each item is then validated into
a `MemorizedFact` on its own; invalid items are dropped and counted in `ExtractionOutcome.rejected`.

`extract_with_summary` also rewrites the rolling summary in the same call (an `ExtractionWithSummary` output
with an optional `summary`), so a summary due on an extraction turn costs no model call of its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar, get_args
from uuid import UUID

from pydantic import BaseModel, Field, ValidationError
from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.models import Model

from ..errors import ExtractionError
from ..models import FactCategory, FactSource, MemorizedFact, Message
from ..privacy import redact_sensitive
from ..taxonomy import default_importance, render_taxonomy_for_prompt
from .base import SUMMARY_LANGUAGE_NAMES, ExtractionOutcome, SummaryAnswer, SummaryRequest

__all__ = [
    "DEFAULT_EXTRACTION_INSTRUCTIONS",
    "SUMMARY_INSTRUCTIONS",
    "CandidateFact",
    "ExtractionReport",
    "ExtractionWithSummary",
    "LLMExtractor",
]

MAX_FACT_CHARS = 500
"""Longest fact content accepted from the model (the default `MemorySettings.max_fact_chars`)."""

DEFAULT_EXTRACTION_INSTRUCTIONS = f"""\
You extract long-term memory about a user from a conversation between the user and an assistant.

Extract only facts that will still be true and useful in future conversations, in these categories:
{render_taxonomy_for_prompt()}

Do NOT extract:
- one-off details of this single conversation (the quantity or drawing of today's request, greetings);
- low-confidence guesses: if the user did not say it and it does not clearly follow, leave it out;
- contradictions the conversation has not resolved;
- payment data (card numbers, bank accounts), passwords, API keys or other credentials;
- sensitive personal data (ids, religion, politics, sexual orientation, home address);
- clinical details: never a diagnosis, a medication or dose, a test result. If a health matter changes how to
  serve the user, store only a non-clinical "health_note" saying what it affects ("Tiene una condición
  médica que afecta a los turnos").

Each message is shown as [id] role (timestamp): text. Dates: write absolute dates (YYYY-MM-DD) in the content,
resolving "next Friday", "mañana", "la semana pasada"... against the timestamp of the message that says them.

For each fact give:
- content: one short third-person sentence in the user's language, e.g. "Prefiere aluminio 7075 para
  prototipos" or "Requires ISO 9001 certification";
- category: one of the categories above;
- confidence: 0 to 1, how sure you are the fact is true and lasting;
- source: "explicit" if the user said it, "inferred" if you concluded it;
- importance: 1 (trivia) to 5 (must never be forgotten); use the category's default unless the user insists;
- message_ids: the ids of the messages the fact comes from;
- expires_at (optional): an ISO 8601 date-time after which a temporary fact is no longer true, e.g. the end
  of the weekend for "estaré fuera este fin de semana"; leave it out for lasting facts;
- replaces (optional): the id of a known fact (listed with its id in brackets) that this fact supersedes
  because the user changed it ("el presupuesto ahora es 2000 €" replaces "No puede superar 1000 €").

If the user restates a known fact, return it again with the known fact's exact wording (it is reinforced, not
duplicated). Return an empty list when there is nothing worth remembering.
"""

SUMMARY_INSTRUCTIONS = """
When the prompt has a [ROLLING SUMMARY] section, also rewrite the rolling summary of the conversation in
`summary`, from the old summary and the messages it lists:
- keep only what matters later: decisions, rejected options, constraints, preferences, the current focus;
- when the user changed their mind, add one line `outdated: <old> → <new>` and do not state the old as current;
- no quotes, recipes or details that only served one answer;
- write it in the language and within the length the section gives.
Without that section, leave `summary` out.
"""

_OutputT = TypeVar("_OutputT", bound="ExtractionReport")

_CATEGORIES: frozenset[str] = frozenset(get_args(FactCategory))
_SOURCES: frozenset[str] = frozenset(get_args(FactSource))


class CandidateFact(BaseModel):
    """One fact as the model proposes it. Types are deliberately loose: checked per item after the run."""

    content: str
    """The fact, one short third-person sentence."""
    category: str
    """Expected: preference, requirement, constraint or feedback."""
    confidence: float
    """Expected: 0 to 1."""
    source: str = "explicit"
    """Expected: explicit or inferred."""
    importance: int | None = None
    """1 (trivia) to 5 (must never be forgotten); out-of-range values are clamped; None: the category's
    default (`memory_plugin.taxonomy`)."""
    message_ids: list[str] = Field(default_factory=list)
    """Ids of the messages the fact comes from."""
    expires_at: str | None = None
    """ISO 8601 time after which a temporary fact stops being true; checked per item."""
    replaces: str | None = None
    """Id of a known fact this one supersedes; must be one of the ids shown."""


class ExtractionReport(BaseModel):
    """The extraction agent's structured output."""

    facts: list[CandidateFact] = Field(default_factory=list)
    """Candidate facts; may be empty."""


class ExtractionWithSummary(ExtractionReport):
    """The output when the rolling summary is rewritten in the same call."""

    summary: str | None = None
    """The rewritten rolling summary; None or empty keeps the previous version."""


def _one_line(text: str) -> str:
    # One message per line: a newline inside a message must not look like the start of another message.
    return " ".join(text.split())


def _message_line(message: Message) -> str:
    # Card numbers, passwords and keys never leave for the model: it cannot extract what it does not see.
    content = _one_line(redact_sensitive(message.content).text)
    return f"[{message.id}] {message.role} ({message.timestamp.isoformat()}): {content}"


def _render_prompt(
    messages: Sequence[Message], known_facts: Sequence[MemorizedFact], summary: SummaryRequest | None = None
) -> str:
    lines: list[str] = []
    if known_facts:
        lines.append("Known facts (id in brackets; restate them in these words, or name the id in `replaces`):")
        lines.extend(f"- [{fact.id}] ({fact.category}) {_one_line(fact.content)}" for fact in known_facts)
        lines.append("")
    lines.append("Conversation:")
    lines.extend(_message_line(message) for message in messages)
    if summary is not None:
        shown = {message.id for message in messages}
        earlier = [m for m in summary.messages if m.id not in shown]
        lines += ["", "[ROLLING SUMMARY]"]
        lines.append(
            f"Rewrite it in {SUMMARY_LANGUAGE_NAMES[summary.language]}, at most {summary.max_tokens} tokens, from the"
            " old summary, the earlier messages below (already extracted: for the summary only) and the conversation."
        )
        lines += ["Old summary:", summary.previous or "(none)"]
        if earlier:
            lines.append("Earlier messages:")
            lines.extend(_message_line(message) for message in earlier)
    return "\n".join(lines)


@dataclass(slots=True)
class _Tally:
    """Per-reason counts of one extraction's validation."""

    rejections: dict[str, int] = field(default_factory=dict)
    dropped_fields: dict[str, int] = field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejections[reason] = self.rejections.get(reason, 0) + 1

    def drop_field(self, name: str) -> None:
        self.dropped_fields[name] = self.dropped_fields.get(name, 0) + 1


def _parse_expiry(raw: str | None, after: datetime, tally: _Tally) -> datetime | None:
    """The model's `expires_at`, if it is a time after `after` (the fact's message); else None, counted."""
    if raw is None or not raw.strip():
        return None
    try:
        value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        tally.drop_field("expires_at")
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=after.tzinfo)  # a bare date-time is in the conversation's timezone
    if value <= after:
        tally.drop_field("expires_at")
        return None
    return value


def _to_fact(
    candidate: CandidateFact,
    by_id: dict[str, Message],
    fallback_ids: tuple[str, ...],
    known_ids: dict[str, UUID],
    tally: _Tally,
) -> MemorizedFact | None:
    """Validate one candidate; None (and a counted reason) when it cannot become a fact."""
    content = candidate.content.strip()
    category = candidate.category.strip().lower()
    source = candidate.source.strip().lower()
    if not content:
        tally.reject("empty")
        return None
    if len(content) > MAX_FACT_CHARS:
        tally.reject("too_long")
        return None
    if category not in _CATEGORIES:
        tally.reject("unknown_category")
        return None
    if source not in _SOURCES:
        tally.reject("unknown_source")
        return None
    if not math.isfinite(candidate.confidence) or not 0.0 <= candidate.confidence <= 1.0:
        tally.reject("bad_confidence")
        return None
    # Provenance must point at messages we sent; invented ids are dropped, and a fact with none left is
    # attributed to the whole excerpt rather than lost.
    ids = tuple(dict.fromkeys(i for i in candidate.message_ids if i in by_id)) or fallback_ids
    timestamps: list[datetime] = [by_id[i].timestamp for i in ids if i in by_id]
    learned_at = max(timestamps) if timestamps else None
    replaces: UUID | None = None
    if candidate.replaces is not None and candidate.replaces.strip():
        # Only a fact we showed can be replaced: an invented or foreign id must never invalidate a row.
        replaces = known_ids.get(candidate.replaces.strip().strip("[]").lower())
        if replaces is None:
            tally.drop_field("replaces")
    expires_at = _parse_expiry(candidate.expires_at, learned_at, tally) if learned_at is not None else None
    importance = candidate.importance if candidate.importance is not None else default_importance(category)  # type: ignore[arg-type]
    try:
        return MemorizedFact.model_validate(
            {
                "content": content,
                "category": category,
                "confidence": candidate.confidence,
                "source": source,
                # Importance is a ranking hint: clamp rather than lose an otherwise good fact.
                "importance": min(max(importance, 1), 5),
                "source_message_ids": ids,
                # Learned when the last message it rests on was written.
                **({"timestamp": learned_at} if learned_at is not None else {}),
                "expires_at": expires_at,
                "replaces": replaces,
            }
        )
    except ValidationError:
        tally.reject("invalid")  # e.g. NUL bytes in the content
        return None


@dataclass
class LLMExtractor:
    """`FactExtractor` backed by a language model through a pydantic-ai `Agent` with structured output.

    `LLMExtractor("openai:gpt-4o-mini")` or, in tests, `LLMExtractor(FunctionModel(...))`. The agent is built on
    first use and reused. Model failures raise `ExtractionError`; invalid items are dropped one by one.
    """

    model: Model | str
    """A pydantic-ai model, or a model name such as "openai:gpt-4o-mini"."""
    instructions: str = DEFAULT_EXTRACTION_INSTRUCTIONS
    """The extraction policy given to the model."""
    retries: int = 1
    """How many times pydantic-ai asks the model again when its output does not match `ExtractionReport`."""
    _agent: Agent[None, ExtractionReport] | None = field(default=None, init=False, repr=False, compare=False)
    _summary_agent: Agent[None, ExtractionWithSummary] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def name(self) -> str:
        """The model prefixed with "llm:", e.g. "llm:openai:gpt-4o-mini"."""
        return f"llm:{self._model_label}"

    @property
    def _model_label(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.model_id

    def _get_agent(self) -> Agent[None, ExtractionReport]:
        if self._agent is None:
            self._agent = self._new_agent(ExtractionReport, self.instructions)
        return self._agent

    def _get_summary_agent(self) -> Agent[None, ExtractionWithSummary]:
        if self._summary_agent is None:
            self._summary_agent = self._new_agent(ExtractionWithSummary, self.instructions + SUMMARY_INSTRUCTIONS)
        return self._summary_agent

    def _new_agent(self, output_type: type[_OutputT], instructions: str) -> Agent[None, _OutputT]:
        try:
            return Agent(
                self.model,
                output_type=output_type,
                instructions=instructions,
                retries=self.retries,
                name="memory-fact-extractor",
            )
        # Resolving a model name can fail in many ways (unknown provider, missing API key, provider package
        # not installed); all of them mean extraction cannot run, which callers handle as ExtractionError.
        except Exception as exc:
            raise ExtractionError(f"cannot set up extraction model {self._model_label!r}: {exc}") from exc

    async def extract(
        self, messages: Sequence[Message], *, known_facts: Sequence[MemorizedFact] = ()
    ) -> ExtractionOutcome:
        """Ask the model for facts in `messages`, then validate each proposed fact on its own.

        An empty `messages` returns an empty outcome without calling the model. Raises `ExtractionError` when the
        model fails (HTTP or connection error, or output that does not match the schema after the retries).
        """
        if not messages:
            return ExtractionOutcome()
        return await self._extract(self._get_agent(), messages, known_facts, None)

    async def extract_with_summary(
        self, messages: Sequence[Message], *, known_facts: Sequence[MemorizedFact] = (), summary: SummaryRequest
    ) -> ExtractionOutcome:
        """As `extract`, and in the same model call the rolling summary rewritten from `summary.previous` and
        `summary.messages` (`ExtractionOutcome.summary`; an empty one has no text and an error, the facts are
        kept). One call serves both, so a summary due on an extraction turn costs no call of its own."""
        if not messages and not summary.messages:
            return ExtractionOutcome(summary=SummaryAnswer(error="no messages"))
        return await self._extract(self._get_summary_agent(), messages, known_facts, summary)

    async def _extract(
        self,
        agent: Agent[None, ExtractionReport] | Agent[None, ExtractionWithSummary],
        messages: Sequence[Message],
        known_facts: Sequence[MemorizedFact],
        summary: SummaryRequest | None,
    ) -> ExtractionOutcome:
        prompt = _render_prompt(messages, known_facts, summary)
        try:
            result = await agent.run(prompt)
        except AgentRunError as exc:
            # UnexpectedModelBehavior (unusable output after retries), ModelHTTPError, ModelAPIError, limits.
            raise ExtractionError(f"fact extraction with {self.name} failed: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            # Provider SDKs raise their own transport errors (openai 3.x speaks httpx2, not httpx). Extraction
            # runs after the answer is produced, so any failure is reported as ExtractionError, never allowed
            # to lose the turn; the original exception stays chained for debugging.
            raise ExtractionError(f"fact extraction with {self.name} failed: {type(exc).__name__}: {exc}") from exc

        by_id = {message.id: message for message in messages}
        user_ids = tuple(message.id for message in messages if message.role == "user")
        fallback_ids = user_ids or tuple(by_id)
        known_ids = {str(fact.id).lower(): fact.id for fact in known_facts}
        tally = _Tally()
        output = result.output
        facts = [
            fact
            for candidate in output.facts
            if (fact := _to_fact(candidate, by_id, fallback_ids, known_ids, tally)) is not None
        ]
        answer: SummaryAnswer | None = None
        if summary is not None:
            text = (output.summary or "").strip() if isinstance(output, ExtractionWithSummary) else ""
            answer = SummaryAnswer(text) if text else SummaryAnswer(error="the model returned no summary")
        return ExtractionOutcome(
            facts=facts,
            rejected=sum(tally.rejections.values()),
            model_calls=result.usage.requests,
            rejections=tally.rejections,
            dropped_fields=tally.dropped_fields,
            summary=answer,
        )
