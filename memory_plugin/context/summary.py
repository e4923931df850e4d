"""The rolling summary's rules (pure): when it is due, what an offline (extractive) one says, what may be stored.
The writer that applies them, with a model and a store, is `summarizer.py`.

A short, versioned digest of a conversation, rewritten only when needed.

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
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from ..extraction.policy import is_explicit_trigger, is_small_talk
from ..models import Message
from ..privacy import HealthNotesConsent, redact_note_text, screen_health
from ..quality.matching import match_guard
from .lines import one_line
from .tokens import TokenCounter

__all__ = [
    "EXTRACTIVE_HEADER",
    "RESYNC_HEADER",
    "SummaryPolicy",
    "SummaryReason",
    "clip_to_tokens",
    "detect_language",
    "extractive_summary",
    "private_summary",
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
