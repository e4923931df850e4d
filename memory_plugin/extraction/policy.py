"""When to extract: the extraction policy, as configuration, and the per-session cursor that batches it.

Extraction costs a model call, so it runs only when one of these triggers fires for a session, and then
once, over every message of the session not extracted yet (batched):

- `explicit`: a user message not extracted yet is a memory instruction — "recuerda…", "remember…",
  "apunta que…", "ten en cuenta…", "keep in mind…" (each a memory request the offline extractor also reads),
  "no me sugieras…", "don't suggest…", "ya no…", "from now on", "a partir de ahora"… (plus
  `MemorySettings.extraction_extra_triggers`); it fires at once, so the instruction holds in the next session;
- `end_of_request`: the caller says a request is complete (the budget-request workflow does when the user
  confirms);
- `cadence`: `MemorySettings.extract_every_n_messages` (default 4) *user* messages with content are waiting.
  The assistant's answers between them go along as context but do not count, and neither does small talk
  ("gracias", "ok", "hola"), which has nothing to remember: that is what keeps a long conversation near
  0.25 calls per user turn instead of 0.5 (bench/quality.py measures it).

A batch made only of small talk is skipped without a call (the cursor moves past it). Never more than one
extraction per session is in flight: a second trigger waits, then finds the cursor moved and extracts only
what is still pending, if a trigger still holds.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..models import Message

if TYPE_CHECKING:
    from ..models import MemorizedFact
    from ..settings import MemorySettings

__all__ = [
    "ExtractionCursors",
    "ExtractionPolicy",
    "ExtractionRun",
    "ExtractionTrigger",
    "is_explicit_trigger",
    "is_small_talk",
]

ExtractionTrigger = Literal["explicit", "end_of_request", "cadence", "manual"]
"""Why an extraction ran; `manual`: a caller asked for it (`MemoryManager.remember_from_session`)."""


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.replace("’", "'"))
    return " ".join("".join(c for c in decomposed if not unicodedata.combining(c)).lower().split())


# Memory instructions, on folded text (lower case, no accents). Spanish then English.
_EXPLICIT = re.compile(
    r"\b(?:recuerd[ae]n?|recordad|no\s+(?:te\s+)?olvides|apunta(?:te|lo)?|apuntad|toma\s+nota"
    r"|ten(?:ed|ga|gan)?\s+en\s+cuenta"
    r"|no\s+(?:me|nos)\s+(?:vuelv\w+\s+a\s+)?(?:sugier|sugir|recomiend|recomend|ofrezc|propong)\w*"
    r"|ya\s+no|a\s+partir\s+de\s+ahora|de\s+ahora\s+en\s+adelante|desde\s+ahora"
    r"|remember|(?:don'?t|do\s+not)\s+forget|keep\s+in\s+mind|make\s+a\s+note|take\s+note"
    r"|(?:don'?t|do\s+not|never)\s+(?:suggest|recommend|offer|propose)|no\s+longer|not\s+any\s*more"
    r"|from\s+now\s+on|going\s+forward)\b"
)
# Whole messages made only of these words are small talk: nothing in them to remember.
_SMALL_TALK_WORDS = frozenset(
    """
    hola buenas buenos buen dia dias tardes noches gracias muchas mil vale ok okay okey perfecto perfecta genial
    estupendo estupenda de acuerdo entendido entendida hasta luego pronto manana adios un una saludo saludos si
    claro bien muy todo correcto listo lista nada mas por favor jaja jeje guay
    hi hello hey thanks thank you so much lot many great perfect cool sure yes yeah yep no nope bye goodbye cheers
    got it sounds good morning afternoon evening fine all right alright nice awesome lol see soon the a
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_WORD = re.compile(r"[a-zñ']+|\d+")


def is_explicit_trigger(text: str, extra: Sequence[str] = ()) -> bool:
    """Whether `text` asks the memory to remember, avoid or change something (see the module docstring)."""
    folded = _fold(text)
    return bool(_EXPLICIT.search(folded)) or any(_fold(phrase) in folded for phrase in extra if phrase.strip())


def is_small_talk(text: str) -> bool:
    """Whether `text` is only greetings, thanks or acknowledgements ("¡Muchas gracias!", "ok, perfect")."""
    words = _WORD.findall(_fold(text))
    return len(words) <= 8 and all(word in _SMALL_TALK_WORDS for word in words)


@dataclass(frozen=True, slots=True)
class ExtractionPolicy:
    """When extraction runs (built from `MemorySettings` by `from_settings`)."""

    every_n_user_messages: int = 4
    """Cadence: extract once this many user messages with content are pending."""
    on_explicit_triggers: bool = True
    """Extract at once when a pending user message is a memory instruction."""
    at_end_of_request: bool = True
    """Extract when the caller says a request is complete."""
    extra_triggers: tuple[str, ...] = ()
    """More phrases that count as explicit triggers (matched case- and accent-insensitively)."""

    @classmethod
    def from_settings(cls, settings: MemorySettings) -> ExtractionPolicy:
        """The policy configured in `settings` (`extract_*` fields)."""
        return cls(
            every_n_user_messages=settings.extract_every_n_messages,
            on_explicit_triggers=settings.extract_on_explicit_triggers,
            at_end_of_request=settings.extract_at_end_of_request,
            extra_triggers=tuple(settings.extraction_extra_triggers),
        )

    def decide(self, pending: Sequence[Message], *, end_of_request: bool = False) -> ExtractionTrigger | None:
        """The trigger that fires for these pending messages, or None."""
        said = [m for m in pending if m.role == "user" and not is_small_talk(m.content)]
        if not said:
            return None
        if self.on_explicit_triggers and any(is_explicit_trigger(m.content, self.extra_triggers) for m in said):
            return "explicit"
        if end_of_request and self.at_end_of_request:
            return "end_of_request"
        if len(said) >= self.every_n_user_messages:
            return "cadence"
        return None


@dataclass(slots=True)
class ExtractionRun:
    """What one `MemoryManager.extract_if_due` call did."""

    trigger: ExtractionTrigger | None = None
    """Why it ran; None when nothing was due."""
    messages: int = 0
    """Messages given to the extractor (all pending ones, user and assistant)."""
    stored: list[MemorizedFact] = field(default_factory=list)
    """Facts written or reinforced."""
    superseded: list[MemorizedFact] = field(default_factory=list)
    """Stored facts the write superseded (`WriteOutcome.superseded`): they keep their rows, no longer current."""
    skipped: bool = False
    """True when the pending messages were only small talk: the cursor moved on, no call was made."""
    error: str | None = None
    """The failure (extraction or storage), if any; the pending messages stay pending for the next trigger,
    except when facts were only set aside (`set_aside`): the rest was written and the cursor moved on."""
    set_aside: int = 0
    """Extracted facts not written because, even alone, their write was over a database limit (its
    `statement_timeout`...): reported (`error`, `MemoryStats.extraction_facts_set_aside`, the log) and kept for
    review (`memory-plugin journal`: `--readmit` writes them, `--discard` drops them), not retried."""
    summary_asked: bool = False
    """True when the extraction's model call was also asked for the rolling summary (it was due): the
    summary needs no call of its own this turn, whether or not that part succeeded."""


@dataclass(slots=True)
class _Flight:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    """Callers holding or waiting for the lock; the entry is removed when it drops to zero."""


class ExtractionCursors:
    """Per session: the last message already extracted, and a lock so one extraction at a time runs.

    Cursors are bounded like the session store (least recently used sessions are forgotten first); a
    forgotten cursor only means the session's window is extracted again, which reinforces instead of
    duplicating. Locks exist only while someone holds or waits for them.
    """

    def __init__(self, max_sessions: int) -> None:
        self._max_sessions = max_sessions
        self._last: OrderedDict[str, str] = OrderedDict()
        self._flights: dict[str, _Flight] = {}

    def pending(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        """The messages after the cursor (all of them when the cursor's message left the window)."""
        last = self._last.get(session_id)
        ids = [m.id for m in messages]
        if last is None or last not in ids:
            return list(messages)
        return list(messages[ids.index(last) + 1 :])

    def advance(self, session_id: str, messages: Sequence[Message]) -> None:
        """Mark `messages` (the pending ones just handled) as extracted."""
        if not messages:
            return
        self._last[session_id] = messages[-1].id
        self._last.move_to_end(session_id)
        while len(self._last) > self._max_sessions:
            self._last.popitem(last=False)

    @asynccontextmanager
    async def flight(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's single-flight lock: `async with cursors.flight(session_id): ...`."""
        flight = self._flights.get(session_id)
        if flight is None:
            flight = self._flights[session_id] = _Flight()
        flight.users += 1
        try:
            async with flight.lock:
                yield
        finally:
            flight.users -= 1
            if flight.users == 0:
                del self._flights[session_id]

    def __len__(self) -> int:
        """Sessions with a cursor."""
        return len(self._last)
