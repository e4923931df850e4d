"""The scripted shop conversation the context benchmarks replay: one customer of a machining shop, Spanish and
English, with the facts a well-behaved extractor finds in each message and the models that answer as one would
(`bench.context_budget`, `bench.context_cache`)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin.context.summary import extractive_summary
from memory_plugin.context.tokens import BpeTokenCounter
from memory_plugin.extraction import ExtractionOutcome
from memory_plugin.models import MemorizedFact, Message, UserPreferences


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
