"""Context budget over a scripted 300-turn conversation: tokens sent, model calls, facts at the end.

    python -m bench.context_budget            # 300 user turns, four variants (~20 s)
    python -m bench.context_budget --turns 60 # a shorter smoke run

One customer of a machining shop, Spanish and English: preferences, a rejection, a budget cap, a delivery
day and a goal stated in the first turns; three of them changed later (material, budget cap, delivery day)
and a second rejection added; quote questions, small talk and a stock-check tool call every fifth turn.

Every turn goes through `ContextBuilder.build` (query-aware facts, slots, rolling summary, the history
clamped to the budget) with the whole conversation so far as the caller's `message_history`, then what
`MemoryCapability(context=…, extract_inline=True)` does after a run: `record_exchange`, `extract_if_due` (the
real extraction policy and runner) and `after_turn`. The extractor is `LLMExtractor` on a counting
`FunctionModel` that returns the facts scripted for the messages it is shown (with `replaces`) and, when its
prompt asks for it, the rewritten rolling summary: the calls counted are those of the real path. Memory runs on
the in-memory stores (tokens and calls do not depend on the backend).

Reported:
- per checkpoint turn: tokens of the full history (what an agent without memory would resend) and tokens
  sent with memory (memory block + clamped history), their ratio (target <= 10 % after 100 turns), the
  memory block alone (target <= 1,000);
- model calls per user turn for extraction + summary together (target <= 0.3) in four variants: separate
  calls; the summary in the extraction's call when due there (own calls otherwise); `summary_with_extraction`
  (rewritten only on extraction turns, in that call); offline (extractive summary); and the most turns the
  summary was behind the conversation;
- at the end: every fact stated early and still valid present in the memory block, and no superseded
  one present except on an `outdated:` line;
- the token counter: o200k_base vs cl100k_base on the conversation's messages (the approximation error
  for models whose vocabulary is not available offline), and the chars/4 rule's error against o200k_base;
- then (`--no-cache` skips it; `python -m bench.context_cache` runs it alone) the same conversation, up to 120
  turns, through the default `MemoryCapability(memory)`: the share of each request that is a byte-identical
  prefix of the previous one, by what changed between them, and the last turn's receipt.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID, uuid4

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from rich.console import Console
from rich.table import Table

from bench.shop_conversation import (
    EARLY,
    LATER,
    ScriptedExtractor,
    answer_text,
    extraction_model,
    summary_model,
    user_turn,
)
from memory_plugin import InMemoryStore, MemoryManager, MemorySettings
from memory_plugin.context.budget import BudgetSettings
from memory_plugin.context.builder import ContextBuilder
from memory_plugin.context.history import history_tokens
from memory_plugin.context.store import InMemoryContextStore, session_scope
from memory_plugin.context.summarizer import RollingSummarizer
from memory_plugin.context.summary import SummaryPolicy
from memory_plugin.context.tokens import BpeTokenCounter, token_counter
from memory_plugin.extraction import FactExtractor, LLMExtractor
from memory_plugin.models import MemoryUpdate


@dataclass
class Checkpoint:
    turn: int
    full: int
    sent: int
    memory: int
    messages_kept: int


@dataclass
class Run:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    memory_max: int = 0
    extraction_calls: int = 0
    summary_calls: int = 0
    extraction_turns: int = 0
    combined_turns: int = 0
    summary_lag_max: int = 0
    user_turns: int = 0
    present: dict[str, bool] = field(default_factory=dict)
    superseded_shown: dict[str, bool] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)
    seconds: float = 0.0
    last_instructions: str = ""


def _shown(instructions: str, marks: Sequence[str]) -> bool:
    lines = [ln for ln in instructions.casefold().splitlines() if not ln.startswith("outdated:")]
    return any(all(m.casefold() in ln for m in marks) for ln in lines)


Variant = Literal["separate", "combined", "with_extraction", "offline"]
VARIANTS: dict[Variant, str] = {
    "separate": "LLM extractor and summarizer, separate calls",
    "combined": "LLM extractor writes the summary when it is due on an extraction turn",
    "with_extraction": "summary_with_extraction: the summary only on extraction turns, in that call",
    "offline": "offline (no model: extractive summary)",
}


async def run(turns: int, variant: Variant, *, seed: int = 7) -> Run:
    rng = random.Random(seed)
    settings = MemorySettings(embedding_model="none", agent_model="openai:gpt-4o", background_extraction=False)
    counter = token_counter("openai:gpt-4o")
    result = Run()
    extraction_calls: list[int] = []
    summary_calls: list[int] = []
    offline = variant == "offline"
    extractor: FactExtractor = (
        ScriptedExtractor() if offline else LLMExtractor(extraction_model(extraction_calls, counter))
    )
    async with MemoryManager.open(settings, store=InMemoryStore(), extractor=extractor) as memory:
        store = InMemoryContextStore()
        summarizer = RollingSummarizer(
            store,
            counter,
            None if offline else summary_model(summary_calls, counter),
            SummaryPolicy(with_extraction=variant == "with_extraction"),
        )
        builder = ContextBuilder(memory, store, counter, BudgetSettings(), summarizer)
        if variant in ("combined", "with_extraction"):
            memory.keep_context_current(builder)  # what MemoryCapability(context=builder) does
        user: UUID = uuid4()
        session = "bench-context"
        scope = session_scope(session)
        history: list[ModelMessage] = []
        superseded: set[str] = set()
        last_written, version = 0, None
        started = time.perf_counter()
        for turn in range(1, turns + 1):
            text, facts, prefs = user_turn(turn, rng)
            superseded.update(f.replaces for f in facts if f.replaces)
            result.user_turns += 1
            built = await builder.build(session, user, query=text, history=history)
            report = built.report
            full = history_tokens(history, counter)
            result.memory_max = max(result.memory_max, report.memory)
            if full:
                result.ratios.append(report.total / full)
            if turn in (10, 25, 50, 100, 150, 200, 250, 300) or turn == turns:
                result.checkpoints.append(Checkpoint(turn, full, report.total, report.memory, report.messages_kept))
            result.last_instructions = built.instructions
            # The exchange: the user's message, a stock check every fifth turn, the answer.
            answer = answer_text(rng, text)
            history.append(ModelRequest(parts=[UserPromptPart(text)]))
            if turn % 5 == 0:
                call_id = f"stock-{turn}"
                history.append(
                    ModelResponse(parts=[ToolCallPart("consultar_stock", {"material": "7075"}, tool_call_id=call_id)])
                )
                history.append(
                    ModelRequest(
                        parts=[ToolReturnPart("consultar_stock", {"kg": rng.randint(10, 900)}, tool_call_id=call_id)]
                    )
                )
            history.append(ModelResponse(parts=[TextPart(answer)]))
            # What MemoryCapability does after a run with extract_inline=True: record, extract if due (the real
            # policy and runner; with the host, the summary in the same call when due), then slots and summary.
            await memory.record_exchange(session, user, text, answer)
            extraction = await memory.extract_if_due(session, user)
            if prefs is not None:
                await memory.update_memory(MemoryUpdate(user_id=user, session_id=session, preferences=prefs))
            short = await memory.get_short_term(session, user_id=user)
            await builder.after_turn(
                session,
                user,
                short.messages,
                stored=extraction.stored,
                superseded=extraction.superseded,
                extraction_ran=extraction.trigger is not None,
                summary_done=extraction.summary_asked,
            )
            result.extraction_turns += extraction.trigger is not None
            result.combined_turns += extraction.summary_asked
            if offline:  # no model: count the calls an LLM extractor would make
                extraction_calls += [1] if extraction.trigger is not None else []
            current = await summarizer.current(user, scope)
            if current is not None and current != version:
                version, last_written = current, turn
            result.summary_lag_max = max(result.summary_lag_max, turn - last_written)
        result.extraction_calls = len(extraction_calls)
        result.summary_calls = len(summary_calls)
        result.seconds = time.perf_counter() - started
        final = await builder.build(session, user, query="¿Qué plazo tendríais para 10 piezas?", history=history)
        instructions = final.instructions
        result.last_instructions = instructions
        stated = {**EARLY, **LATER}
        all_facts = [f for t, (_, fs, _) in stated.items() if t <= turns for f in fs]
        for f in all_facts:
            if f.key in superseded:
                result.superseded_shown[f.key] = _shown(instructions, f.marks)
            else:
                result.present[f.key] = _shown(instructions, f.marks)
        result.present["industry"] = "aeroespacial" in instructions
    return result


def token_error_table(console: Console) -> None:
    rng = random.Random(3)
    texts = [user_turn(t, rng)[0] for t in range(1, 301)] + [answer_text(rng, "¿Plazo?") for _ in range(100)]
    o200k, cl100k = BpeTokenCounter("o200k_base"), BpeTokenCounter("cl100k_base")
    vs_cl = [abs(o200k.count(t) - cl100k.count(t)) / max(1, cl100k.count(t)) for t in texts]
    chars = [abs(len(t) / 4 - o200k.count(t)) / max(1, o200k.count(t)) for t in texts]
    table = Table(title=f"Token counts on the conversation's {len(texts)} messages")
    table.add_column("approximation")
    table.add_column("mean |error|", justify="right")
    table.add_column("p90 |error|", justify="right")
    for name, errors in (("o200k_base for a cl100k_base model", vs_cl), ("chars / 4 vs o200k_base", chars)):
        ordered = sorted(errors)
        table.add_row(name, f"{statistics.mean(errors):.1%}", f"{ordered[int(0.9 * len(ordered))]:.1%}")
    console.print(table)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--no-cache", action="store_true", help="skip the prompt-cache prefix part")
    args = parser.parse_args(argv)
    console = Console(width=150)
    for variant, label in VARIANTS.items():
        result = asyncio.run(run(args.turns, variant))
        table = Table(title=f"Context budget, {args.turns} user turns, {label}: {result.seconds:.1f} s")
        for col in ("turn", "full history", "sent with memory", "ratio", "memory block", "messages kept"):
            table.add_column(col, justify="right")
        for c in result.checkpoints:
            ratio = f"{c.sent / c.full:.1%}" if c.full else "-"
            table.add_row(str(c.turn), str(c.full), str(c.sent), ratio, str(c.memory), str(c.messages_kept))
        console.print(table)
        turns = result.user_turns
        model = "no model calls (an LLM extractor would make" if variant == "offline" else "model calls"
        console.print(
            f"memory block max {result.memory_max} tokens; {model} per user turn: extraction"
            f" {result.extraction_calls / turns:.3f}, summary {result.summary_calls / turns:.3f},"
            f" together {(result.extraction_calls + result.summary_calls) / turns:.3f}"
            f"{')' if variant == 'offline' else ''}; extraction turns {result.extraction_turns}, of which the"
            f" summary rode along {result.combined_turns}; summary at most {result.summary_lag_max} turns old"
        )
        missing = sorted(k for k, ok in result.present.items() if not ok)
        stale = sorted(k for k, shown in result.superseded_shown.items() if shown)
        console.print(
            f"valid facts present at the end: {sum(result.present.values())}/{len(result.present)}"
            f" (missing: {missing or 'none'}); superseded facts shown as current: {stale or 'none'}"
        )
    token_error_table(console)
    if not args.no_cache:
        from bench import context_cache  # it imports this module's conversation

        turns = min(args.turns, 120)
        context_cache.report(asyncio.run(context_cache.run(turns)), turns, console)


if __name__ == "__main__":
    main()
