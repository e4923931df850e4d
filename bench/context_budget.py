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
import re
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
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console
from rich.table import Table

from memory_plugin import InMemoryStore, MemoryManager, MemorySettings
from memory_plugin.context.budget import BudgetSettings
from memory_plugin.context.builder import ContextBuilder
from memory_plugin.context.history import history_tokens
from memory_plugin.context.store import InMemoryContextStore, session_scope
from memory_plugin.context.summarizer import RollingSummarizer
from memory_plugin.context.summary import SummaryPolicy, extractive_summary
from memory_plugin.context.tokens import BpeTokenCounter, token_counter
from memory_plugin.extraction import ExtractionOutcome, FactExtractor, LLMExtractor
from memory_plugin.models import MemorizedFact, MemoryUpdate, Message, UserPreferences


@dataclass(frozen=True)
class ScriptedFact:
    """A fact a turn states; `replaces` names the scripted fact it supersedes."""

    key: str
    content: str
    category: str
    replaces: str | None = None
    marks: tuple[str, ...] = ()
    """Words that identify it in the memory block."""


# turn -> (user message, facts it states, preferences it states)
EARLY: dict[int, tuple[str, list[ScriptedFact], UserPreferences | None]] = {
    1: (
        "Recuerda que prefiero aluminio 7075 para las piezas",
        [ScriptedFact("material", "Prefiere aluminio 7075", "preference", marks=("aluminio 7075",))],
        None,
    ),
    2: ("Somos una empresa del sector aeroespacial", [], UserPreferences(industry="aeroespacial")),
    3: (
        "No me sugieras acero inoxidable, nunca",
        [ScriptedFact("reject_steel", "No sugerir acero inoxidable", "rejection", marks=("acero inoxidable",))],
        None,
    ),
    4: (
        "Please remember our budget cap is 5000 € per order",
        [ScriptedFact("budget", "Presupuesto máximo 5000 € por pedido", "constraint", marks=("5000 €",))],
        None,
    ),
    5: (
        "Remember we need deliveries on Mondays",
        [ScriptedFact("delivery", "Entregas los lunes", "routine", marks=("lunes",))],
        None,
    ),
    6: (
        "Recuerda: nuestro objetivo es reducir el plazo de entrega a una semana",
        [ScriptedFact("goal", "Reducir el plazo de entrega a una semana", "goal", marks=("una semana",))],
        None,
    ),
    7: (
        "Remember I prefer technical answers with tolerances",
        [ScriptedFact("style", "Prefiere respuestas técnicas con tolerancias", "preference", marks=("tolerancias",))],
        None,
    ),
    8: (
        "Recuerda que el acabado debe ser anodizado",
        [ScriptedFact("finish", "Acabado anodizado obligatorio", "requirement", marks=("anodizado",))],
        None,
    ),
}
LATER: dict[int, tuple[str, list[ScriptedFact], UserPreferences | None]] = {
    150: (
        "Ya no quiero aluminio 7075, a partir de ahora titanio grado 5",
        [ScriptedFact("material2", "Prefiere titanio grado 5", "preference", "material", ("titanio grado 5",))],
        None,
    ),
    200: (
        "From now on the budget cap is 8000 € per order",
        [ScriptedFact("budget2", "Presupuesto máximo 8000 € por pedido", "constraint", "budget", ("8000 €",))],
        None,
    ),
    220: (
        "Don't suggest brass either",
        [ScriptedFact("reject_brass", "No sugerir latón", "rejection", marks=("latón",))],
        None,
    ),
    250: (
        "Cambiando de tema: a partir de ahora entregamos los miércoles",
        [ScriptedFact("delivery2", "Entregas los miércoles", "routine", "delivery", ("miércoles",))],
        None,
    ),
}
PARTS = ["bridas", "soportes", "ejes", "carcasas", "brackets", "shafts", "housings", "flanges"]
QUESTIONS_ES = [
    "¿Qué plazo tendríais para {n} {part}?",
    "¿Cuánto costarían {n} {part} con tolerancia de ±0,05 mm?",
    "¿Podéis hacer roscado M{k} en los {part}?",
    "Necesito presupuesto para {n} {part} con taladros pasantes de {k} mm",
    "¿Qué acabado recomendáis para {part} expuestos a la intemperie?",
]
QUESTIONS_EN = [
    "What lead time can you do for {n} {part}?",
    "How much would {n} {part} cost with ±0.05 mm tolerance?",
    "Can you tap M{k} threads in the {part}?",
    "I need a quote for {n} {part} with {k} mm through holes",
]
SMALL_TALK = ["gracias", "ok", "perfecto, gracias", "thanks", "vale"]


def answer_text(rng: random.Random, question: str) -> str:
    n = rng.randint(2, 6)
    sentences = [
        f"Para esa consulta ({question[:40]}…) calculamos unos {rng.randint(5, 30)} días laborables.",
        f"El precio orientativo es de {rng.randint(8, 120)} € por unidad, sin incluir tratamiento térmico.",
        "Trabajamos con centros de mecanizado de 5 ejes y control dimensional al 100 %.",
        f"Podemos mantener tolerancias de ±0,0{rng.randint(1, 5)} mm en las cotas críticas.",
        "Si nos envías el plano en STEP preparamos la oferta formal en 24 horas.",
        f"El lote mínimo recomendado es de {rng.randint(5, 50)} piezas para amortizar el utillaje.",
    ]
    return " ".join(rng.sample(sentences, n))


def user_turn(turn: int, rng: random.Random) -> tuple[str, list[ScriptedFact], UserPreferences | None]:
    if turn in EARLY:
        return EARLY[turn]
    if turn in LATER:
        return LATER[turn]
    if rng.random() < 0.12:
        return rng.choice(SMALL_TALK), [], None
    template = rng.choice(QUESTIONS_EN if rng.random() < 0.4 else QUESTIONS_ES)
    return template.format(n=rng.choice([5, 10, 20, 50, 100]), part=rng.choice(PARTS), k=rng.randint(3, 12)), [], None


CONTENT = {f.key: f.content for _, facts, _ in [*EARLY.values(), *LATER.values()] for f in facts}
SCRIPT = {text: facts for text, facts, _ in [*EARLY.values(), *LATER.values()]}
"""What a well-behaved extractor finds in each scripted user message."""


def scripted_facts(user_texts: Sequence[str], known: dict[str, str]) -> list[dict[str, object]]:
    """The facts stated in `user_texts`, as an extraction model returns them; `known`: content -> id of the
    known facts shown to it, for `replaces`."""
    found: list[dict[str, object]] = []
    for text in user_texts:
        for f in SCRIPT.get(text, []):
            replaces = known.get(CONTENT[f.replaces]) if f.replaces else None
            found.append(
                {"content": f.content, "category": f.category, "confidence": 0.95, "importance": 4}
                | ({"replaces": replaces} if replaces else {})
            )
    return found


_LINE = re.compile(r"^\[[^\]]+\] (user|assistant) \([^)]*\): (.*)$")
_KNOWN = re.compile(r"^- \[([0-9a-f-]{36})\] \([a-z_]+\) (.*)$")


def _users(lines: Sequence[str]) -> list[str]:
    return [m.group(2) for line in lines if (m := _LINE.match(line)) and m.group(1) == "user"]


def _model_summary(
    previous: str | None, said: Sequence[str], outdated: Sequence[tuple[str, str]], counter: BpeTokenCounter
) -> str:
    """A well-behaved model's summary: the old one kept, replaced facts marked `outdated:`, decisions added."""
    messages = [Message(role="user", content=t) for t in said if t.strip()]
    text = extractive_summary(previous, messages, counter, max_tokens=600, outdated=outdated)
    return "\n".join(text.splitlines()[1:]) or "Sin novedades."  # a model's summary has no extractive header


def extraction_model(calls: list[int], counter: BpeTokenCounter) -> FunctionModel:
    """The extraction model behind `LLMExtractor`: the scripted facts of the messages it is shown and, when
    the prompt asks for it, the rewritten rolling summary, in one structured answer."""

    def extract(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        body, _, summary_part = prompt.partition("[ROLLING SUMMARY]")
        known = {m.group(2): m.group(1) for line in body.splitlines() if (m := _KNOWN.match(line))}
        conversation = _users(body.partition("Conversation:")[2].splitlines())
        facts = scripted_facts(conversation, known)
        args: dict[str, object] = {"facts": facts}
        if summary_part:
            old, _, earlier = summary_part.partition("Old summary:")[2].partition("Earlier messages:")
            previous = old.strip()
            replaced = [(CONTENT[f.replaces], f.content) for t in conversation for f in SCRIPT.get(t, []) if f.replaces]
            said = _users(earlier.splitlines()) + conversation
            args["summary"] = _model_summary(None if previous == "(none)" else previous, said, replaced, counter)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    return FunctionModel(extract)


@dataclass
class ScriptedExtractor:
    """The offline variant's extractor (no model, like the rules extractor): the scripted facts."""

    name: str = "scripted"

    async def extract(
        self, messages: Sequence[Message], *, known_facts: Sequence[MemorizedFact] = ()
    ) -> ExtractionOutcome:
        known = {f.content: str(f.id) for f in known_facts}
        found = scripted_facts([m.content for m in messages if m.role == "user"], known)
        facts = [
            MemorizedFact.model_validate({**f, "source": "explicit", "source_message_ids": [messages[-1].id]})
            for f in found
        ]
        return ExtractionOutcome(facts=facts)


def summary_model(calls: list[int], counter: BpeTokenCounter) -> FunctionModel:
    """A well-behaved summarizer (the separate call): as `extraction_model`'s summary part."""

    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        old, _, rest = prompt.partition("[NEW MESSAGES]")
        new, _, replaced = rest.partition("[REPLACED FACTS]")
        previous = old.replace("[OLD SUMMARY]", "").strip()
        said = [line[len("user: ") :] for line in new.splitlines() if line.startswith("user: ")]
        outdated = [tuple(line.split(" → ", 1)) for line in replaced.splitlines() if " → " in line]
        text = _model_summary(None if previous == "(none)" else previous, said, [(a, b) for a, b in outdated], counter)
        return ModelResponse(parts=[TextPart(text)])

    return FunctionModel(summarize)


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
