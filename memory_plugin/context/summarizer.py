"""`RollingSummarizer`: writes a user's or a session's rolling summary into a `ContextStore` when it is due
(the rules it follows, what is due and what may be stored, are `summary.py`'s): a pydantic-ai summarizer agent in
the conversation's own language, else an extractive summary; the newest three versions kept, `rollback` and the
weekly `resync` from the facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import EllipsisType
from typing import Literal
from uuid import UUID

from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError, UserError
from pydantic_ai.models import Model

from ..extraction.base import SUMMARY_LANGUAGE_NAMES
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, Message, utc_now
from ..privacy import redact_sensitive
from .lines import one_line
from .store import ContextStore, SummaryKind, SummaryVersion
from .summary import (
    RESYNC_HEADER,
    SummaryPolicy,
    SummaryReason,
    clip_to_tokens,
    detect_language,
    extractive_summary,
    private_summary,
    summary_due,
)
from .tokens import TokenCounter

__all__ = ["RollingSummarizer", "SummaryPlan", "SummaryUpdate"]


_INSTRUCTIONS = """You keep the rolling summary of a conversation between a machining shop's assistant and a \
customer. Rewrite the summary (at most {max_tokens} tokens) from the old summary and the new messages:
- keep only what matters later: decisions, rejected options, constraints, preferences, the current focus;
- when the user changed their mind, add one line `outdated: <old> → <new>` and do not state the old as current;
- no quotes, recipes or details that only served one answer;
- write in the conversation's language: {language_name}.
Answer with the summary only."""


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
        previous: SummaryVersion | EllipsisType | None = ...,
    ) -> SummaryPlan:
        """What a rewrite now would cover and why (`reason` None: not due); the arguments as for `update`."""
        if isinstance(previous, EllipsisType):
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

    async def write(
        self, user_id: UUID, scope: str, plan: SummaryPlan, text: str, kind: SummaryKind, *, copy_to: str | None = None
    ) -> SummaryVersion:
        """Store `text` as the new version `plan` describes (and as one of `copy_to`, in the same round trip)."""
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
            copy_to=copy_to,
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
        previous: SummaryVersion | EllipsisType | None = ...,
        copy_to: str | None = None,
    ) -> SummaryUpdate:
        """Rewrite the summary if due, from the messages it does not cover yet.

        `messages`: the conversation's messages in order (a session's recent window is enough). The new ones
        are those after the newest message the current version covers (by timestamp); or, with
        `message_count` (how many messages there have been in all, `messages` being the last of them), those
        beyond the version's count. `outdated`: (old, new) contents of facts replaced since, for `outdated:`
        lines. A failed or empty model answer keeps the previous version. `extraction_ran`: whether a fact
        extraction runs on this turn (with `policy.with_extraction`, the summary waits for one). `start_from`:
        the text a first version builds on (a new session starts from the user's summary). `previous`: the
        current version when the caller just read it (`...`: read it now). `copy_to`: a new version is also
        stored under that scope, in the same round trip."""
        plan = await self.plan(
            user_id,
            scope,
            messages,
            message_count=message_count,
            outdated=outdated,
            force=force,
            extraction_ran=extraction_ran,
            start_from=start_from,
            previous=previous,
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
            return await self._store(user_id, scope, plan, text, "extractive", model_calls=0, copy_to=copy_to)
        try:
            text = await self._ask(plan.old_text, plan.fresh, outdated, plan.language)
        except (AgentRunError, UserError, OSError, ValueError) as exc:
            logger.warning("%s rolling summary not updated, previous version kept: %s", LOG_PREFIX, exc)
            return SummaryUpdate(previous, False, reason, 1, str(exc))
        return await self.accept(user_id, scope, plan, text, model_calls=1, copy_to=copy_to)

    async def accept(
        self,
        user_id: UUID,
        scope: str,
        plan: SummaryPlan,
        text: str | None,
        *,
        model_calls: int = 0,
        copy_to: str | None = None,
    ) -> SummaryUpdate:
        """Store a model's summary for `plan`, cut to the budget; an empty one keeps the previous version."""
        text = clip_to_tokens((text or "").strip(), self.counter, self.policy.max_tokens).strip()
        if not text:
            logger.warning("%s the summarizer answered nothing; previous version kept", LOG_PREFIX)
            return SummaryUpdate(plan.previous, False, plan.reason, model_calls, "empty summary")
        return await self._store(user_id, scope, plan, text, "model", model_calls=model_calls, copy_to=copy_to)

    async def _store(
        self,
        user_id: UUID,
        scope: str,
        plan: SummaryPlan,
        text: str,
        kind: SummaryKind,
        *,
        model_calls: int,
        copy_to: str | None = None,
    ) -> SummaryUpdate:
        """Write `text` through the privacy filter (`private_summary`). Nothing meaningful left keeps the
        previous version."""
        filtered = private_summary(text, consent=self.policy.health_notes)
        if filtered is None:
            logger.warning("%s nothing left of the rolling summary after the privacy filter; kept", LOG_PREFIX)
            return SummaryUpdate(plan.previous, False, plan.reason, model_calls, "nothing left after the filter")
        written = await self.write(user_id, scope, plan, filtered, kind, copy_to=copy_to)
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
