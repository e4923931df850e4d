"""(f) Memory quality over a scripted 200-turn conversation: model calls, rows, duplicates, stale facts.

    python -m bench.quality

One customer of a machining shop, twelve sessions over six weeks, Spanish and English: budget requests
(materials, quantities, finishes), budgets and preferences that change, rejections, repeats and paraphrases,
two temporary facts, small talk, a card number and a health detail. Every user turn goes through the real
`MemoryManager` on an embedded PostgreSQL exactly as the budget-request workflow drives it: context read,
user message, answer, `extract_if_due` (with `end_of_request` when the user confirms).

The extractor is an `LLMExtractor` over a counting `FunctionModel` that plays a well-behaved model: for every
user message in the batch it is given, it returns the facts scripted for that turn (with the message's id),
and, when a scripted fact supersedes another that is among the candidate facts shown in the prompt, names
that candidate's id in `replaces`. Two variants:

- `as said`: the model words each fact as the user said it this time (paraphrases stay paraphrases);
- `reuses known wording`: when the fact is among the candidates shown, the model restates it in the known
  wording, as its instructions ask.

What is measured, per variant (every fact row is mapped back to its scripted fact id through its content,
computed with the same redaction and date rules the manager applies):

- model calls per user turn (target ≤ 0.3);
- facts stated (distinct scripted facts; statements including repeats) vs fact rows stored, and current rows;
- duplicates stored: for each scripted fact, current rows beyond the first (target 0);
- facts lost: scripted facts still true at the end (not superseded, not expired) without a current row
  (target 0; a near-duplicate merge that swallows a changed value shows up here);
- superseded facts reaching the prompt: scripted-superseded fact ids present in the context read before each
  user turn, summed over turns (target 0), and how many distinct ones;
- rejections in the final prompt, the expired temporary fact absent, the current one present;
- redactions: facts redacted or dropped, clinical details reduced, and scripted secrets found in the table.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
from pydantic import SecretStr
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console

from agents.vocabulary import SHOP_VOCABULARY
from bench.embedded import migrated
from bench.quality_script import SCRIPT, TOTAL_TURNS, Fact, Turn
from bench.tables import BenchTable, render
from memory_plugin import MemoryManager, MemorySettings, Message
from memory_plugin.dates import resolve_relative_dates
from memory_plugin.extraction import LLMExtractor
from memory_plugin.privacy import sanitize_fact_text
from memory_plugin.text import normalize_key

__all__ = [
    "SCRIPT",
    "TOTAL_TURNS",
    "QualityResult",
    "Turn",
    "bench_quality",
    "main",
    "quality_table",
    "run_conversation",
]

CALLS_PER_TURN_TARGET = 0.3


# --- the scripted extraction model -----------------------------------------------------------------------------
_USER_LINE = re.compile(r"^\[(?P<id>[0-9a-f]{32})\] user \(", re.M)
_KNOWN_LINE = re.compile(r"^- \[(?P<id>[0-9a-f-]{36})\] \((?P<category>\w+)\) (?P<content>.*)$", re.M)


@dataclass
class ScriptedExtractionModel:
    """A FunctionModel body that returns the facts scripted for the user messages it is shown, and counts calls."""

    turns_by_message: dict[str, Turn]
    """Message id → the scripted turn (the bench fills it as it sends messages)."""
    stored_fid: dict[str, str]
    """Stored content (normalised) → scripted fact id, to recognise candidate facts in the prompt."""
    reuse_known_wording: bool = False
    calls: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        prompt = "\n".join(
            str(part.content)
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        )
        known: dict[str, tuple[str, str]] = {}  # scripted fid -> (candidate id, content)
        for match in _KNOWN_LINE.finditer(prompt):
            fid = self.stored_fid.get(normalize_key(match.group("content")))
            if fid is not None:
                known[fid] = (match.group("id"), match.group("content"))
        items: list[dict[str, Any]] = []
        for match in _USER_LINE.finditer(prompt):
            turn = self.turns_by_message.get(match.group("id"))
            if turn is None:
                continue
            for fact in turn.facts:
                content = fact.content
                if self.reuse_known_wording and fact.fid in known:
                    content = known[fact.fid][1]
                item: dict[str, Any] = {
                    "content": content,
                    "category": fact.category,
                    "confidence": 0.9,
                    "source": "explicit",
                    "message_ids": [match.group("id")],
                }
                if fact.supersedes is not None and fact.supersedes in known:
                    item["replaces"] = known[fact.supersedes][0]
                items.append(item)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"facts": items})])


# --- the run ----------------------------------------------------------------------------------------------------
@dataclass
class QualityResult:
    """What one run of the conversation measured."""

    variant: str
    user_turns: int = 0
    model_calls: int = 0
    statements: int = 0
    facts_stated: int = 0
    rows_stored: int = 0
    current_rows: int = 0
    duplicates: int = 0
    duplicate_ids: list[str] = field(default_factory=list)
    superseded_in_prompt: int = 0
    superseded_ids_in_prompt: set[str] = field(default_factory=set)
    rejections_stated: int = 0
    rejections_in_final_prompt: int = 0
    expired_in_prompt: bool = False
    current_temporary_in_prompt: bool = False
    redacted: int = 0
    dropped_sensitive: int = 0
    health_reduced: int = 0
    health_dropped: int = 0
    secrets_in_table: int = 0
    unmapped_rows: int = 0
    lost_ids: list[str] = field(default_factory=list)
    """Scripted facts still true at the end (not superseded, not expired) with no current row."""
    triggers: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def calls_per_turn(self) -> float:
        """Model calls per user turn."""
        return self.model_calls / self.user_turns if self.user_turns else 0.0


_SECRETS = ("4111 1111 1111 1111", "4111111111111111", "diabetes")


def _stored_forms(fact: Fact, said_at: datetime) -> str | None:
    """The content the manager stores for `fact` said at `said_at` (None: not stored), normalised."""
    clean = sanitize_fact_text(fact.content, fact.category)
    if clean.text is None:
        return None
    return normalize_key(resolve_relative_dates(clean.text, said_at).text)


async def run_conversation(
    database_url: str, *, reuse_known_wording: bool, embedding_dedup: bool = True
) -> QualityResult:
    """Play the whole script for a fresh user on `database_url`; return the measures. Facts are embedded with
    the offline MiniLM (as a manager with `embedding_model="local"`); `embedding_dedup=False` turns the
    embedding near-duplicate rule off (`dedup_embedding_threshold` above 1), for comparison."""
    user = uuid4()
    turns_by_message: dict[str, Turn] = {}
    stored_fid: dict[str, str] = {}
    model = ScriptedExtractionModel(turns_by_message, stored_fid, reuse_known_wording=reuse_known_wording)
    settings = MemorySettings(
        database_url=SecretStr(database_url),
        auto_migrate=False,
        pool_min_size=1,
        embedding_model="local",
        dedup_embedding_threshold=MemorySettings().dedup_embedding_threshold if embedding_dedup else 2.0,
        vocabulary=SHOP_VOCABULARY,  # the script is a machining shop's conversation
    )
    variant = "reuses known wording" if reuse_known_wording else "as said"
    result = QualityResult(variant if embedding_dedup else f"{variant}, no embedding de-dup")
    superseded: set[str] = set()
    stated: Counter[str] = Counter()
    rejections: set[str] = set()
    now = datetime.now(UTC)
    started = time.perf_counter()
    async with MemoryManager.open(
        settings, extractor=LLMExtractor(FunctionModel(model, model_name="scripted"))
    ) as memory:
        for index, (days_ago, session_turns) in enumerate(SCRIPT):
            session = f"quality-{index + 1}"
            at = (now - timedelta(days=days_ago)).replace(hour=9, minute=0, second=0, microsecond=0)
            for turn in session_turns:
                context = await memory.get_memory_context(session, user)
                for shown in context.long_term.facts:
                    fid = stored_fid.get(normalize_key(shown.content))
                    if fid in superseded:
                        result.superseded_in_prompt += 1
                        result.superseded_ids_in_prompt.add(fid)
                message = Message(role="user", content=turn.text, timestamp=at)
                turns_by_message[message.id] = turn
                for said in turn.facts:
                    form = _stored_forms(said, at)
                    if form is not None:
                        stored_fid[form] = said.fid
                    stated[said.fid] += 1
                    if said.supersedes is not None:
                        superseded.add(said.supersedes)
                    if said.category == "rejection":
                        rejections.add(said.fid)
                await memory.add_message(session, message, user_id=user)
                reply = "Anotado, te preparo el presupuesto." if turn.facts else "De acuerdo."
                await memory.add_message(session, Message(role="assistant", content=reply, timestamp=at), user_id=user)
                await memory.extract_if_due(session, user, end_of_request=turn.end_of_request)
                result.user_turns += 1
                at += timedelta(minutes=3)
        final = await memory.get_memory_context("quality-final", user)
        stats = memory.stats
        result.model_calls = model.calls
        result.redacted = stats.facts_redacted
        result.dropped_sensitive = stats.facts_dropped_sensitive
        result.health_reduced = stats.facts_health_reduced
        result.health_dropped = stats.facts_dropped_health
        result.triggers = {
            "explicit": stats.extractions_explicit,
            "end of request": stats.extractions_end_of_request,
            "cadence": stats.extractions_cadence,
            "skipped (small talk)": stats.extractions_skipped,
        }
    result.seconds = time.perf_counter() - started
    result.statements = sum(stated.values())
    result.facts_stated = len(stated)
    final_fids = {stored_fid.get(normalize_key(f.content)) for f in final.long_term.facts}
    result.rejections_stated = len(rejections)
    result.rejections_in_final_prompt = len(rejections & final_fids)
    result.expired_in_prompt = "away1" in final_fids
    result.current_temporary_in_prompt = "away2" in final_fids
    current_fids = await asyncio.to_thread(_count_rows, database_url, user, stored_fid, result)
    still_true = set(stated) - superseded - {"away1"}  # the weekend trip of six weeks ago has expired
    result.lost_ids = sorted(still_true - current_fids)
    return result


def _count_rows(database_url: str, user: UUID, stored_fid: dict[str, str], result: QualityResult) -> set[str]:
    """Fill the row counts of `result`; return the scripted fact ids that have a current row."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "select content, invalid_at is null and archived_at is null and (expires_at is null or expires_at > now())"
            " from public.user_memory where user_id = %s and kind = 'fact'",
            (user,),
        ).fetchall()
    result.rows_stored = len(rows)
    current: Counter[str] = Counter()
    for content, is_current in rows:
        fid = stored_fid.get(normalize_key(content))
        if fid is None:
            result.unmapped_rows += 1
        if is_current:
            result.current_rows += 1
            if fid is not None:
                current[fid] += 1
        result.secrets_in_table += sum(secret in content for secret in _SECRETS)
    result.duplicate_ids = sorted(fid for fid, n in current.items() if n > 1)
    result.duplicates = sum(n - 1 for n in current.values() if n > 1)
    return set(current)


# --- report -----------------------------------------------------------------------------------------------------
def quality_table(results: Sequence[QualityResult]) -> BenchTable:
    """The markdown table for one or more variants."""

    table = BenchTable(
        key="quality",
        title="(f) memory quality over a scripted 200-turn conversation (mocked extractor, embedded PostgreSQL)",
        columns=["measure", *(f"model {r.variant}" for r in results), "target"],
    )

    def row(label: str, values: Sequence[str], target: str = "—") -> None:
        table.rows.append([label, *values, target])

    row("user turns (12 sessions, Spanish and English)", [f"{r.user_turns}" for r in results])
    row(
        "model calls per user turn",
        [
            f"{r.calls_per_turn:.3f} ({r.model_calls} calls) {_mark(r.calls_per_turn <= CALLS_PER_TURN_TARGET)}"
            for r in results
        ],
        f"≤ {CALLS_PER_TURN_TARGET}",
    )
    row(
        "extractions: explicit / end of request / cadence / skipped",
        [" / ".join(str(n) for n in r.triggers.values()) for r in results],
    )
    row("facts stated: distinct (statements incl. repeats)", [f"{r.facts_stated} ({r.statements})" for r in results])
    row("fact rows stored (current)", [f"{r.rows_stored} ({r.current_rows})" for r in results])
    row(
        "duplicates stored (current rows beyond one per scripted fact)",
        [f"{r.duplicates} {_mark(r.duplicates == 0)} {_ids(r.duplicate_ids)}" for r in results],
        "0",
    )
    row(
        "facts lost: still true at the end but no current row",
        [f"{len(r.lost_ids)} {_mark(not r.lost_ids)} {_ids(r.lost_ids)}" for r in results],
        "0",
    )
    row(
        "superseded facts reaching the prompt (fact × turn; distinct)",
        [
            f"{r.superseded_in_prompt}; {len(r.superseded_ids_in_prompt)} {_mark(r.superseded_in_prompt == 0)}"
            f" {_ids(sorted(r.superseded_ids_in_prompt))}"
            for r in results
        ],
        "0",
    )
    row(
        "rejections in the final prompt",
        [f"{r.rejections_in_final_prompt} of {r.rejections_stated}" for r in results],
        "all",
    )
    row(
        "temporary facts: expired one absent / current one present",
        [f"{_mark(not r.expired_in_prompt)} / {_mark(r.current_temporary_in_prompt)}" for r in results],
    )
    row(
        "redactions: redacted / dropped / health reduced / health dropped",
        [f"{r.redacted} / {r.dropped_sensitive} / {r.health_reduced} / {r.health_dropped}" for r in results],
    )
    row(
        "scripted secrets found in the table",
        [f"{r.secrets_in_table} {_mark(r.secrets_in_table == 0)}" for r in results],
        "0",
    )
    row("fact rows not recognised as a scripted fact", [f"{r.unmapped_rows}" for r in results], "0")
    row("run time (s)", [f"{r.seconds:.1f}" for r in results])
    table.notes.append(
        "Rows are mapped to scripted facts through their content (the same redaction and date rules as the "
        'manager). "As said": the mocked model words each fact as the user did, so paraphrases reach the '
        'store and only its near-duplicate rules (trigrams, embeddings, guards) can fold them; "reuses known '
        "wording\": it restates a known fact the way it is stored, as the extractor's instructions ask. Facts are "
        'embedded with the offline all-MiniLM-L6-v2; "no embedding de-dup" turns the embedding rule off.'
    )
    return table


def _mark(ok: bool) -> str:
    return "✅" if ok else "❌"


def _ids(ids: Sequence[str]) -> str:
    return f"({', '.join(ids)})" if ids else ""


async def bench_quality(database_url: str | None = None) -> BenchTable:
    """Run both variants (on `database_url`, or a temporary embedded PostgreSQL removed afterwards)."""
    async with migrated(database_url) as url:
        results = [
            await run_conversation(url, reuse_known_wording=False, embedding_dedup=False),
            await run_conversation(url, reuse_known_wording=False),
            await run_conversation(url, reuse_known_wording=True),
        ]
    return quality_table(results)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.quality`."""
    table = asyncio.run(bench_quality())
    render([table], Console(width=240, soft_wrap=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
