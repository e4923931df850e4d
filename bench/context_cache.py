"""Prompt-cache prefix stability and the per-turn receipt of the default `MemoryCapability(memory)`.

    python -m bench.context_cache              # 120 user turns (~1 min)
    python -m bench.context_cache --turns 300

The scripted shop conversation of `bench.context_budget` (preferences, a rejection, a budget cap and a goal
stated early, three of them changed later, quote questions and small talk) runs through a real pydantic-ai
`Agent` with `MemoryCapability(memory, extract_inline=True)` on a `FunctionModel` that records every request
(the scripted extractor, in RAM: tokens do not depend on the backend). For each turn after the first:

- the share of the request's tokens (o200k_base) that is a byte-identical prefix of the previous request, in
  the order a provider serializes it (tool definitions, instructions, then the messages' parts): what a prompt
  cache can reuse. The default agent sends no tools and no instructions of its own, so its request is the
  capability's alone; `--tools` gives it the memory tools (`MemoryCapability(memory, tools=True)`), whose
  definitions are then sent, and counted, ahead of the instructions;
- whether the instructions changed (a durable change: slots, summary or profile rewritten).

Reported: that share on the turns whose instructions did not change (target >= 90 %) and on all turns, and
the last turn's `ContextReceipt` (facts injected and why, tokens per part, what was cut).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal
from uuid import uuid4

from pydantic_ai import Agent
from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from rich.console import Console
from rich.table import Table

from bench.shop_conversation import ScriptedExtractor, answer_text, user_turn
from memory_plugin import InMemoryStore, MemoryCapability, MemoryDeps, MemoryManager, MemorySettings, MemoryUpdate
from memory_plugin.context.history import history_tokens
from memory_plugin.context.receipt import ContextReceipt
from memory_plugin.context.tokens import token_counter
from memory_plugin.models import MemorizedFact

COUNTER = token_counter("openai:gpt-4o")


def serialized(
    instructions: str, messages: Sequence[ModelMessage], *, turn_part: bool = True, tools: Sequence[str] = ()
) -> str:
    """The request as a provider lays it out: the tool definitions (`tool_text`), the instructions, then each
    part of each message in order (without the per-turn memory part when not `turn_part`)."""
    parts = [*tools, instructions]
    for message in messages:
        parts.append(f"<{message.kind}>")
        texts = [str(getattr(p, "content", "")) for p in message.parts]
        parts += [t for t in texts if turn_part or _TURN_MARK not in t]
    return "\x1e".join(parts)


_TURN_MARK = "bears on this message"


def tool_text(tool: ToolDefinition) -> str:
    """A tool definition as it is sent: name, description and parameters' JSON schema."""
    return json.dumps([tool.name, tool.description, tool.parameters_json_schema], sort_keys=True, ensure_ascii=False)


def _summary_sent(messages: Sequence[ModelMessage]) -> str:
    """The rolling summary the request carries ahead of its history ("" when none)."""
    first = messages[0].parts[0] if messages and messages[0].parts else None
    return str(first.content) if isinstance(first, CompactionPart) else ""


def prefix_share(previous: str, current: str) -> float:
    """Tokens of the longest byte-identical prefix of `previous` and `current`, over `current`'s tokens."""
    a, b = previous.encode(), current.encode()
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    common = b[:n].decode(errors="ignore")
    return COUNTER.count(common) / max(1, COUNTER.count(current))


Kind = Literal["kept", "restarted", "summary", "slots"]
KINDS: dict[Kind, str] = {
    "kept": "  history kept its start",
    "restarted": "  history restarted (the budget was full)",
    "summary": "summary replaced (it comes with a history restart)",
    "slots": "instructions changed (a fact stated, changed or forgotten)",
}


@dataclass(frozen=True)
class Pair:
    """One turn against the previous one."""

    kind: Kind
    prefix: int
    """Tokens of the byte-identical prefix."""
    tokens: int
    """Tokens of this request."""
    ceiling: int
    """Tokens of the previous request without its per-turn part: the most the prefix can be (the previous
    answer, the new prompt and the new per-turn facts are new by nature)."""

    @property
    def share(self) -> float:
        return self.prefix / max(1, self.tokens)


@dataclass
class CacheRun:
    pairs: list[Pair] = field(default_factory=list)
    """Each turn after the first, against the one before."""
    tokens: list[int] = field(default_factory=list)
    """Each request's tokens: instructions and messages (the tool definitions apart, `tool_tokens`)."""
    tool_tokens: int = 0
    """Tokens of the tool definitions sent with each request (0: the agent has no tools)."""
    receipt: ContextReceipt | None = None

    def of(self, *kinds: Kind) -> list[Pair]:
        return [p for p in self.pairs if p.kind in kinds]


def _first_message(messages: Sequence[ModelMessage]) -> str:
    """The history's first message after the summary (what tells a restart)."""
    rest = messages[1:] if _summary_sent(messages) else messages
    return serialized("", rest[:1])


# Past orders the user spoke of before this conversation: facts no slot holds, so a question about the same
# part brings some of them into the per-turn part (`--history-facts`).
PAST_ORDERS = [
    MemorizedFact(content=text, category="feedback", confidence=0.9, source="explicit")  # type: ignore[arg-type]
    for text in (
        "El último pedido de bridas llegó con rebabas en los taladros",
        "Los soportes del pedido de marzo se entregaron con dos días de retraso",
        "Los ejes de 20 mm necesitaron un rectificado adicional",
        "Las carcasas anodizadas en negro gustaron mucho al cliente final",
        "The brackets order in May failed the flatness check on 3 parts",
        "The shafts were re-quoted after a change to 42CrMo4",
        "The housings need a 2 mm draft on the inner walls",
        "The flanges are mounted on a drone frame and must stay under 80 g",
    )
]


async def run(
    turns: int, *, seed: int = 7, budget: int = 1000, history_facts: bool = False, tools: bool = False
) -> CacheRun:
    """The conversation through the default capability; `history_facts`: the user also has `PAST_ORDERS`;
    `tools`: the capability also gives the model the memory tools (their definitions are sent and counted)."""
    rng = random.Random(seed)
    settings = MemorySettings(
        embedding_model="none", agent_model="openai:gpt-4o", background_extraction=False, context_budget_tokens=budget
    )
    seen: list[tuple[str, list[ModelMessage], list[str]]] = []
    answers: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((info.instructions or "", list(messages), [tool_text(t) for t in info.function_tools]))
        return ModelResponse(parts=[TextPart(answers[-1])])

    result = CacheRun()
    async with MemoryManager.open(settings, store=InMemoryStore(), extractor=ScriptedExtractor()) as memory:
        agent = Agent(FunctionModel(model), deps_type=MemoryDeps, capabilities=[MemoryCapability(memory, tools=tools)])
        user = uuid4()
        deps = MemoryDeps(session_id=f"{user}/bench-cache", user_id=user)
        if history_facts:
            await memory.update_memory(MemoryUpdate(user_id=user, new_facts=PAST_ORDERS))
        for turn in range(1, turns + 1):
            text, _, prefs = user_turn(turn, rng)
            answers.append(answer_text(rng, text))
            await agent.run(text, deps=deps)
            if prefs is not None:
                await memory.update_memory(MemoryUpdate(user_id=user, preferences=prefs))
        result.receipt = deps.receipt
    previous: tuple[str, list[ModelMessage], str, list[str]] | None = None
    for instructions, messages, definitions in seen:
        current = serialized(instructions, messages, tools=definitions)
        total = COUNTER.count(current)
        result.tokens.append(COUNTER.count(instructions) + history_tokens(messages, COUNTER))
        result.tool_tokens = COUNTER.count("".join(definitions))
        if previous is not None:
            before, before_messages, text, before_tools = previous
            kind: Kind = (
                "slots"
                if instructions != before
                else "summary"
                if _summary_sent(messages) != _summary_sent(before_messages)
                else "kept"
                if _first_message(messages) == _first_message(before_messages)
                else "restarted"
            )
            prefix = round(prefix_share(text, current) * total)
            ceiling = COUNTER.count(serialized(before, before_messages, turn_part=False, tools=before_tools))
            result.pairs.append(Pair(kind, prefix, total, min(total, ceiling)))
        previous = (instructions, messages, current, definitions)
    return result


def _row(table: Table, label: str, pairs: Sequence[Pair], *, ceiling: bool = False) -> None:
    if not pairs:
        table.add_row(label, "0", "-", "-", "-", "-", "-")
        return
    shares = sorted((p.ceiling if ceiling else p.prefix) / max(1, p.tokens) for p in pairs)
    reused = sum(p.ceiling if ceiling else p.prefix for p in pairs)
    table.add_row(
        label,
        str(len(pairs)),
        f"{statistics.mean(shares):.1%}",
        f"{reused / sum(p.tokens for p in pairs):.1%}",
        f"{statistics.median(shares):.1%}",
        f"{shares[len(shares) // 10]:.1%}",
        f"{sum(s >= 0.9 for s in shares) / len(shares):.0%}",
    )


def report(result: CacheRun, turns: int, console: Console, *, budget: int = 1000) -> None:
    """The prefix-stability table and the last receipt."""
    title = f"Prompt-cache prefix, {turns} user turns, default MemoryCapability(memory), budget {budget} tokens"
    table = Table(title=title)
    for col in ("consecutive turns", "n", "mean share", "of tokens", "median", "p10", "turns >= 90 %"):
        table.add_column(col, justify="right")
    _row(table, "slots and summary unchanged", result.of("kept", "restarted"))
    for kind in ("kept", "restarted"):
        _row(table, KINDS[kind], result.of(kind))
    _row(table, "  ceiling: previous request minus its per-turn part", result.of("kept", "restarted"), ceiling=True)
    for kind in ("summary", "slots"):
        _row(table, KINDS[kind], result.of(kind))
    _row(table, "all", result.pairs)
    console.print(table)
    kept = result.of("kept")
    new = [p.tokens - p.prefix for p in kept]
    mean_new = statistics.mean(new) if new else 0
    console.print(
        f"request tokens (instructions + messages, o200k): max {max(result.tokens)},"
        f" mean {statistics.mean(result.tokens):.0f}, last {result.tokens[-1]}"
        f"{f'; tool definitions {result.tool_tokens} more' if result.tool_tokens else ''}; new per turn when the"
        f" history kept its start: mean {mean_new:.0f} tokens (the previous answer and the new prompt)"
    )
    if kept:
        # A turn that kept its start adds the previous answer and the new prompt; at most the budget is sent.
        most = budget + result.tool_tokens
        console.print(
            f"most a kept-start turn can reuse at this budget: 1 - {mean_new:.0f} / {most} = {1 - mean_new / most:.1%}"
            f" (every such turn full); their requests averaged {statistics.mean(p.tokens for p in kept):.0f} tokens"
        )
    receipt = result.receipt
    if receipt is None:
        return
    parts = Table(title="Last turn's receipt (MemoryDeps.receipt): tokens per part")
    for name in receipt.tokens:
        parts.add_column(name, justify="right")
    parts.add_row(*(str(v) for v in receipt.tokens.values()))
    console.print(parts)
    facts = Table(title="Last turn's receipt: facts")
    for col in ("shown", "reason", "score", "parts", "tokens", "fact"):
        facts.add_column(col)
    for label, group in (("injected", receipt.injected), ("in slots", receipt.in_slots), ("cut", receipt.cut)):
        for f in group:
            score = f"{f.score:.3f}" if f.score is not None else "-"
            why = ", ".join(f"{k} {v:.2f}" for k, v in f.components.items())
            facts.add_row(label, f.reason, score, why or "-", str(f.tokens), f.content[:60])
    console.print(facts)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--budget", type=int, default=1000, help="MEMORY_CONTEXT_BUDGET_TOKENS")
    parser.add_argument(
        "--history-facts", action="store_true", help="the user also has past orders no slot holds (per-turn facts)"
    )
    parser.add_argument("--tools", action="store_true", help="MemoryCapability(memory, tools=True): tools are sent")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.turns, budget=args.budget, history_facts=args.history_facts, tools=args.tools))
    report(result, args.turns, Console(width=150), budget=args.budget)


if __name__ == "__main__":
    main()
