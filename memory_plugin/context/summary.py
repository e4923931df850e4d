"""The rolling summary: a short, versioned digest of a conversation, rewritten only when needed.

When (`SummaryPolicy`, configurable): more than ~600 new characters, every 6–8 messages, a topic change
("cambiando de tema", "another thing"…) or an explicit decision or rejection ("vamos con…", "no me
sugieras…", "let's go with…"). Who writes it: a pydantic-ai summarizer agent in the conversation's own
language, at most 600 tokens, with one `outdated: …` line per thing the user changed their mind about.
Without a model (offline) an extractive summary is built from the messages and says that it is one.

Safety: a failed or empty model answer keeps the previous version (the failure is logged); the newest three
versions are kept, so `rollback` restores the previous one; `resync` rebuilds the summary from the user's
current facts only, dropping anything that drifted in through successive rewrites.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError, UserError
from pydantic_ai.models import Model

from ..extraction.base import SUMMARY_LANGUAGE_NAMES
from ..extraction.policy import is_explicit_trigger, is_small_talk
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, Message, utc_now
from ..privacy import HealthNotesConsent, redact_note_text, redact_sensitive, screen_health
from ..quality.matching import match_guard
from .lines import one_line
from .store import ContextStore, SummaryKind, SummaryVersion
from .tokens import TokenCounter

__all__ = [
    "EXTRACTIVE_HEADER",
    "RollingSummarizer",
    "SummaryPlan",
    "SummaryPolicy",
    "SummaryReason",
    "SummaryUpdate",
    "detect_language",
    "extractive_summary",
    "summary_due",
]

SummaryReason = Literal["new_text", "cadence", "topic_change", "decision", "resync", "forced"]
"""Why a summary was rewritten."""

EXTRACTIVE_HEADER = {
    "es": "[Resumen extractivo, sin modelo: frases literales de la conversación]",
    "en": "[Extractive summary, no model: sentences quoted from the conversation]",
}
RESYNC_HEADER = {
    "es": "[Resumen reconstruido a partir de los hechos vigentes]",
    "en": "[Summary rebuilt from the current facts]",
}


@dataclass(frozen=True)
class SummaryPolicy:
    """When the rolling summary is rewritten (from `MemorySettings`)."""

    min_new_chars: int = 600
    """Rewrite when the latest exchange (the user's message and the answer) holds more than this many
    characters."""
    every_n_messages: int = 8
    """Rewrite when this many messages (user and assistant) came since the last version."""
    on_topic_change: bool = True
    """Rewrite when the user changes the subject ("cambiando de tema", "another thing"…)."""
    on_decision: bool = True
    """Rewrite when the user decides or rejects something ("vamos con…", "no me sugieras…")."""
    max_tokens: int = 600
    """Longest summary kept; a longer model answer is cut at a line boundary."""
    with_extraction: bool = False
    """Rewrite only on a turn where a fact extraction also runs (the caller says so), so that one model call
    can serve both: the summary's own triggers then wait for the extraction's."""
    resync_after: timedelta = timedelta(days=7)
    """A summary older than this since its last resync is rebuilt from the facts (weekly by default)."""
    health_notes: HealthNotesConsent = "off"
    """The privacy filter's consent for health notes (`MemorySettings.health_notes`): a summary is stored
    as a verbatim note is, secrets and the user's own clinical detail replaced by placeholders."""


_TOPIC = re.compile(
    r"\b(?:cambiando de tema|otra cosa|otro tema|por cierto|hablando de otra|nuevo proyecto|otra consulta"
    r"|another thing|change of subject|changing the subject|new topic|by the way|on another note|new project)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:vamos con|me quedo con|decidido|he decidido|hemos decidido|confirmo|confirmado|adelante con|descarta\w*"
    r"|no me convence|no nos sirve|prefiero|let'?s go with|i'?ll take|we'?ll take|decided|confirmed|go ahead with"
    r"|drop the|rule out|doesn'?t work for|instead of)\b",
    re.IGNORECASE,
)


def summary_due(new_messages: Sequence[Message], policy: SummaryPolicy) -> SummaryReason | None:
    """Why the summary should be rewritten now given the messages since its last version, or None."""
    if not new_messages:
        return None
    user_texts = [m.content for m in new_messages if m.role == "user" and not is_small_talk(m.content)]
    if policy.on_decision and any(_DECISION.search(t) or is_explicit_trigger(t) for t in user_texts):
        return "decision"
    if policy.on_topic_change and any(_TOPIC.search(t) for t in user_texts):
        return "topic_change"
    # One long exchange (the user's message and the answer): counting every character since the last version
    # instead fired every ~2 turns on ordinary answers.
    if sum(len(m.content) for m in new_messages[-2:]) > policy.min_new_chars:
        return "new_text"
    if len(new_messages) >= policy.every_n_messages:
        return "cadence"
    return None


_ES = frozenset(
    [
        "el",
        "la",
        "los",
        "las",
        "de",
        "que",
        "y",
        "en",
        "un",
        "una",
        "por",
        "para",
        "con",
        "no",
        "es",
        "lo",
        "me",
        "se",
        "del",
        "al",
        "más",
        "pero",
        "como",
        "qué",
        "cuánto",
    ]
)
_EN = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "and",
        "to",
        "in",
        "is",
        "it",
        "for",
        "with",
        "not",
        "that",
        "this",
        "you",
        "we",
        "can",
        "what",
        "how",
        "be",
        "are",
    ]
)


def detect_language(texts: Sequence[str]) -> Literal["es", "en"]:
    """`es` or `en`, by stop words of the users' messages (ties and empty text: `es`, the shop's language)."""
    words = re.findall(r"[a-záéíóúñü]+", " ".join(texts).lower())
    es = sum(w in _ES for w in words) + 3 * sum(any(c in w for c in "ñáéíóú") for w in words)
    en = sum(w in _EN for w in words)
    return "en" if en > es else "es"


def clip_to_tokens(text: str, counter: TokenCounter, max_tokens: int) -> str:
    """`text` cut at a line boundary to at most `max_tokens` (the first line cut by words if needed)."""
    if counter.count(text) <= max_tokens:
        return text
    kept: list[str] = []
    for line in text.splitlines():
        if counter.count("\n".join([*kept, line])) > max_tokens:
            break
        kept.append(line)
    if kept:
        return "\n".join(kept)
    words = text.split()
    while words and counter.count(" ".join(words) + "…") > max_tokens:
        words = words[: max(1, len(words) * 3 // 4)] if len(words) > 1 else []
    return " ".join(words) + "…" if words else ""


def extractive_summary(
    previous: str | None,
    messages: Sequence[Message],
    counter: TokenCounter,
    *,
    max_tokens: int,
    outdated: Sequence[tuple[str, str]] = (),
    language: Literal["es", "en"] = "es",
) -> str:
    """A summary without a model, that says it is extractive: `outdated:` lines (replaced facts), then the
    decisions and memory instructions quoted from the messages, then the latest user messages (the current
    focus). From the previous version only its `outdated:` and decision lines carry over, oldest last, so when
    the budget is short the oldest decisions go first and plain questions never pile up. Never longer than
    `max_tokens`."""
    old_lines = [ln for ln in (previous or "").splitlines() if ln and ln not in EXTRACTIVE_HEADER.values()]
    old_outdated = [ln for ln in old_lines if ln.startswith("outdated:")]
    # A quoted sentence that states a replaced fact would read as current: its `outdated:` line says it.
    replaced = [old for old, _ in outdated] + [ln[len("outdated:") :].split(" → ")[0] for ln in old_outdated]
    stale = [_marks(text) for text in replaced]

    def current(text: str) -> bool:
        codes, words = _marks(text)
        return not any((c and c <= codes) or (not c and len(w) >= 2 and w <= words) for c, w in stale)

    def decision(text: str) -> bool:
        return bool(_DECISION.search(text)) or is_explicit_trigger(text)

    user = [m.content for m in messages if m.role == "user" and not is_small_talk(m.content) and current(m.content)]
    key = [f"- {one_line(t, 220)}" for t in user if decision(t)]
    recent = [f"- {one_line(t, 220)}" for t in user[-4:] if not decision(t)]
    old_key = [ln for ln in old_lines if ln.startswith("- ") and decision(ln) and current(ln)]
    lines = [EXTRACTIVE_HEADER[language]]
    lines += [f"outdated: {one_line(old, 100)} → {one_line(new, 100)}" for old, new in outdated]
    lines += old_outdated + key + old_key + recent
    unique = list(dict.fromkeys(lines))
    # Over the budget: drop the oldest decisions (the end of old_key) before anything newer.
    while counter.count("\n".join(unique)) > max_tokens and old_key:
        unique.remove(old_key.pop())
    return clip_to_tokens("\n".join(unique), counter, max_tokens)


_MARK = re.compile(r"\d+|[^\W\d_]{4,}")
_VERBS = frozenset(
    [
        "prefiere",
        "prefiero",
        "prefer",
        "prefers",
        "quiere",
        "quiero",
        "want",
        "wants",
        "necesita",
        "necesito",
        "need",
        "needs",
        "usar",
        "use",
    ]
)


def _marks(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """What identifies a statement across wordings and languages: its numbers, codes, named values (weekdays,
    materials… as in near-duplicate matching: "lunes" and "Mondays" are one value) and proper names; and,
    for statements without any, its distinctive words (4+ letters, without the usual verbs)."""
    codes = frozenset(c for c in match_guard(text).split("|", 1)[1].split(",") if c)
    words = frozenset(w for w in _MARK.findall(text.casefold()) if w not in _VERBS)
    return codes, words


_INSTRUCTIONS = """You keep the rolling summary of a conversation between a machining shop's assistant and a \
customer. Rewrite the summary (at most {max_tokens} tokens) from the old summary and the new messages:
- keep only what matters later: decisions, rejected options, constraints, preferences, the current focus;
- when the user changed their mind, add one line `outdated: <old> → <new>` and do not state the old as current;
- no quotes, recipes or details that only served one answer;
- write in the conversation's language: {language_name}.
Answer with the summary only."""


def private_summary(text: str, *, consent: HealthNotesConsent = "off") -> str | None:
    """A summary as it may be stored, line by line, or None when no line with content is left. A summary both
    quotes the user (first person: their own clinical span becomes a placeholder, as in a verbatim note) and
    states things about them (third person, "tiene diabetes": the fact rule reduces the line to a non-clinical
    health note or drops it); secrets become placeholders in both. At most ~600 tokens: well under 1 ms."""
    kept: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        note = redact_note_text(line, consent=consent).text  # secrets and the user's own clinical span
        if note is None:
            continue
        health = screen_health(note)  # then the fact rule's part: clinical detail stated about the user
        if not health.clinical:
            kept.append(note)
        elif health.note is not None:
            kept.append(("- " if line.startswith("- ") else "") + health.note)
    headers = set(EXTRACTIVE_HEADER.values()) | set(RESYNC_HEADER.values())
    return "\n".join(kept) if any(line not in headers for line in kept) else None


def _prompt(previous: str | None, messages: Sequence[Message], outdated: Sequence[tuple[str, str]]) -> str:
    parts = ["[OLD SUMMARY]", previous or "(none)", "", "[NEW MESSAGES]"]
    # Card numbers, passwords and keys never leave for the model, as for the extractor.
    parts += [f"{m.role}: {one_line(redact_sensitive(m.content).text, 2000)}" for m in messages]
    if outdated:
        parts += ["", "[REPLACED FACTS]"] + [f"{old} → {new}" for old, new in outdated]
    return "\n".join(parts)


@dataclass(frozen=True)
class SummaryPlan:
    """What a rewrite of the summary would cover now (`RollingSummarizer.plan`)."""

    previous: SummaryVersion | None
    """The current version."""
    old_text: str | None
    """What the rewrite builds on: the current version, else the hand-over."""
    fresh: tuple[Message, ...]
    """The messages the current version does not cover."""
    reason: SummaryReason | None
    """Why it is due; None: not due."""
    language: Literal["es", "en"]
    """The conversation's language."""
    message_count: int
    covered_until: datetime | None
    covered_from: datetime | None
    resynced_at: datetime


@dataclass(frozen=True)
class SummaryUpdate:
    """What `RollingSummarizer.update` did."""

    current: SummaryVersion | None
    """The current version after the call (the previous one when nothing was written)."""
    written: bool
    """True when a new version was stored."""
    reason: SummaryReason | None
    """Why it was rewritten (None: not due)."""
    model_calls: int = 0
    """Model calls made (0 or 1)."""
    error: str | None = None
    """Why the model's answer was not used, when it was not."""


@dataclass
class RollingSummarizer:
    """Writes a user's or a session's rolling summary into a `ContextStore` when it is due."""

    store: ContextStore
    """Where versions are kept."""
    counter: TokenCounter
    """Counts the summary's tokens."""
    model: Model | str | None = None
    """The summarizer model (a pydantic-ai model or name); None: extractive summaries, no model call."""
    policy: SummaryPolicy = field(default_factory=SummaryPolicy)
    """When to rewrite."""

    async def current(self, user_id: UUID, scope: str) -> SummaryVersion | None:
        """The current version, or None."""
        versions = await self.store.summary_versions(user_id, scope)
        return versions[0] if versions else None

    async def plan(
        self,
        user_id: UUID,
        scope: str,
        messages: Sequence[Message],
        *,
        message_count: int | None = None,
        outdated: Sequence[tuple[str, str]] = (),
        force: bool = False,
        extraction_ran: bool | None = None,
        start_from: str | None = None,
    ) -> SummaryPlan:
        """What a rewrite now would cover and why (`reason` None: not due); the arguments as for `update`."""
        previous = await self.current(user_id, scope)
        covered = previous.message_count if previous else 0
        if message_count is not None:
            fresh = (
                list(messages[max(0, len(messages) - (message_count - covered)) :]) if message_count > covered else []
            )
        else:
            until = previous.covered_until if previous else None
            fresh = [m for m in messages if until is None or m.timestamp > until]
        total = message_count if message_count is not None else covered + len(fresh)
        covered_until = max((m.timestamp for m in fresh), default=previous.covered_until if previous else None)
        # The resync clock starts with the first version and is carried forward.
        resynced_at = (previous.resynced_at if previous else None) or utc_now()
        # What the summary reaches back to: a first version built on a hand-over covers earlier sessions too.
        if previous is not None:
            covered_from = previous.covered_from
        else:
            covered_from = None if start_from else min((m.timestamp for m in fresh), default=None)
        reason: SummaryReason | None = "forced" if force and fresh else summary_due(fresh, self.policy)
        if reason is None and outdated and fresh:
            reason = "decision"
        if self.policy.with_extraction and extraction_ran is False and not force:
            reason = None
        return SummaryPlan(
            previous=previous,
            old_text=previous.content if previous else start_from,
            fresh=tuple(fresh),
            reason=reason,
            language=detect_language([m.content for m in messages if m.role == "user"]),
            message_count=total,
            covered_until=covered_until,
            covered_from=covered_from,
            resynced_at=resynced_at,
        )

    async def write(self, user_id: UUID, scope: str, plan: SummaryPlan, text: str, kind: SummaryKind) -> SummaryVersion:
        """Store `text` as the new version `plan` describes."""
        return await self.store.add_summary(
            user_id,
            scope,
            text,
            kind=kind,
            language=plan.language,
            message_count=plan.message_count,
            covered_until=plan.covered_until,
            resynced_at=plan.resynced_at,
            covered_from=plan.covered_from,
        )

    async def update(
        self,
        user_id: UUID,
        scope: str,
        messages: Sequence[Message],
        *,
        message_count: int | None = None,
        outdated: Sequence[tuple[str, str]] = (),
        force: bool = False,
        extraction_ran: bool | None = None,
        start_from: str | None = None,
    ) -> SummaryUpdate:
        """Rewrite the summary if due, from the messages it does not cover yet.

        `messages`: the conversation's messages in order (a session's recent window is enough). The new ones
        are those after the newest message the current version covers (by timestamp); or, with
        `message_count` (how many messages there have been in all, `messages` being the last of them), those
        beyond the version's count. `outdated`: (old, new) contents of facts replaced since, for `outdated:`
        lines. A failed or empty model answer keeps the previous version. `extraction_ran`: whether a fact
        extraction runs on this turn (with `policy.with_extraction`, the summary waits for one). `start_from`:
        the text a first version builds on (a new session starts from the user's summary)."""
        plan = await self.plan(
            user_id,
            scope,
            messages,
            message_count=message_count,
            outdated=outdated,
            force=force,
            extraction_ran=extraction_ran,
            start_from=start_from,
        )
        previous, reason = plan.previous, plan.reason
        if reason is None:
            return SummaryUpdate(previous, False, None)
        if self.model is None:
            text = extractive_summary(
                plan.old_text,
                plan.fresh,
                self.counter,
                max_tokens=self.policy.max_tokens,
                outdated=outdated,
                language=plan.language,
            )
            return await self._store(user_id, scope, plan, text, "extractive", model_calls=0)
        try:
            text = await self._ask(plan.old_text, plan.fresh, outdated, plan.language)
        except (AgentRunError, UserError, OSError, ValueError) as exc:
            logger.warning("%s rolling summary not updated, previous version kept: %s", LOG_PREFIX, exc)
            return SummaryUpdate(previous, False, reason, 1, str(exc))
        return await self.accept(user_id, scope, plan, text, model_calls=1)

    async def accept(
        self, user_id: UUID, scope: str, plan: SummaryPlan, text: str | None, *, model_calls: int = 0
    ) -> SummaryUpdate:
        """Store a model's summary for `plan`, cut to the budget; an empty one keeps the previous version."""
        text = clip_to_tokens((text or "").strip(), self.counter, self.policy.max_tokens).strip()
        if not text:
            logger.warning("%s the summarizer answered nothing; previous version kept", LOG_PREFIX)
            return SummaryUpdate(plan.previous, False, plan.reason, model_calls, "empty summary")
        return await self._store(user_id, scope, plan, text, "model", model_calls=model_calls)

    async def _store(
        self, user_id: UUID, scope: str, plan: SummaryPlan, text: str, kind: SummaryKind, *, model_calls: int
    ) -> SummaryUpdate:
        """Write `text` through the privacy filter (`private_summary`). Nothing meaningful left keeps the
        previous version."""
        filtered = private_summary(text, consent=self.policy.health_notes)
        if filtered is None:
            logger.warning("%s nothing left of the rolling summary after the privacy filter; kept", LOG_PREFIX)
            return SummaryUpdate(plan.previous, False, plan.reason, model_calls, "nothing left after the filter")
        written = await self.write(user_id, scope, plan, filtered, kind)
        return SummaryUpdate(written, True, plan.reason, model_calls)

    async def _ask(
        self,
        old: str | None,
        fresh: Sequence[Message],
        outdated: Sequence[tuple[str, str]],
        language: Literal["es", "en"],
    ) -> str:
        assert self.model is not None
        agent: Agent[None, str] = Agent(
            self.model,
            output_type=str,
            instructions=_INSTRUCTIONS.format(
                max_tokens=self.policy.max_tokens, language_name=SUMMARY_LANGUAGE_NAMES[language]
            ),
            name="memory_summarizer",
        )
        result = await agent.run(_prompt(old, fresh, outdated))
        return result.output

    async def rollback(self, user_id: UUID, scope: str) -> SummaryVersion | None:
        """Drop the current version; the previous one (returned) is current again."""
        return await self.store.drop_latest_summary(user_id, scope)

    def resync_due(self, current: SummaryVersion | None, now: datetime | None = None) -> bool:
        """True when the summary has not been rebuilt from facts for `policy.resync_after`."""
        if current is None:
            return False
        since = current.resynced_at or current.created_at
        return (now or utc_now()) - since >= self.policy.resync_after

    async def resync(
        self, user_id: UUID, scope: str, facts: Sequence[MemorizedFact], *, message_count: int = 0
    ) -> SummaryVersion | None:
        """Rebuild the summary from the user's current facts only (no earlier summary, no messages): what
        drifted in through successive rewrites goes. None (nothing written) when no fact is current."""
        valid = [f for f in facts if f.invalid_at is None]
        if not valid:
            return None
        language = detect_language([f.content for f in valid])
        ordered = sorted(valid, key=lambda f: (-f.importance, f.category))
        lines = [RESYNC_HEADER[language]] + [f"- {f.category}: {one_line(f.content, 220)}" for f in ordered]
        text = clip_to_tokens("\n".join(lines), self.counter, self.policy.max_tokens)
        kind: SummaryKind = "resync"
        previous = await self.current(user_id, scope)
        count = max(message_count, previous.message_count if previous else 0)
        return await self.store.add_summary(
            user_id,
            scope,
            text,
            kind=kind,
            language=language,
            message_count=count,
            covered_until=previous.covered_until if previous else None,
            resynced_at=utc_now(),
        )
