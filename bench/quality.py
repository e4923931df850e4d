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
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
from pydantic import SecretStr
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console

from bench.tables import BenchTable, render
from memory_plugin import MemoryManager, MemorySettings, Message
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.migrations import migrate
from memory_plugin.dates import resolve_relative_dates
from memory_plugin.extraction import LLMExtractor
from memory_plugin.models import FactCategory
from memory_plugin.privacy import sanitize_fact_text
from memory_plugin.text import normalize_key

__all__ = ["SCRIPT", "QualityResult", "Turn", "bench_quality", "main", "quality_table", "run_conversation"]

CALLS_PER_TURN_TARGET = 0.3


# --- the script ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Fact:
    """A fact the user states in a turn, as the scripted model returns it."""

    fid: str
    """Scripted fact id: the same for repeats and paraphrases of one fact."""
    content: str
    category: FactCategory
    supersedes: str | None = None
    """The scripted fact id this one replaces (a changed budget, a material no longer used)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn."""

    text: str
    facts: tuple[Fact, ...] = ()
    end_of_request: bool = False
    """The user confirms the request (the workflow's `request_complete`)."""


def _t(text: str, *facts: Fact, end: bool = False) -> Turn:
    return Turn(text, facts, end)


B1 = Fact("budget", "No puede superar 1000 € por pedido", "constraint")
B2 = Fact("budget2", "No puede superar 2000 € por pedido", "constraint", supersedes="budget")
B3 = Fact("budget3", "Budget is capped at 2500 EUR per order", "constraint", supersedes="budget2")
M1 = Fact("mat7075", "Prefiere aluminio 7075 para prototipos", "preference")
M1_PARA = Fact("mat7075", "Prefiere el 7075 para los prototipos", "preference")
M2 = Fact("mat6082", "Prefiere aluminio 6082 para prototipos", "preference", supersedes="mat7075")
CERT = Fact("cert31", "Requiere certificado de material EN 10204 3.1", "requirement")
CERT_PARA = Fact("cert31", "Necesita el certificado 3.1 de material en todos los pedidos", "requirement")
CERT_EN = Fact("cert31", "Requires EN 10204 3.1 material certificates", "requirement")
ISO = Fact("iso9001", "Requiere certificación ISO 9001", "requirement")
TOL = Fact("tol", "Necesita tolerancias de ±0.02 mm en ejes", "requirement")
ANOD = Fact("anod", "Prefiere anodizado negro", "preference")
ANOD_EN = Fact("anod", "Prefers black anodizing", "preference")
REJ_1045 = Fact("rej1045", "No quiere que le sugieran acero 1045", "rejection")
REJ_1045_PARA = Fact("rej1045", "No le sugieran acero 1045", "rejection")
REJ_POWDER = Fact("rejpowder", "Do not suggest powder coating", "rejection")
DELIV_FRI = Fact("delivfri", "Recibe entregas solo los viernes por la mañana", "routine")
DELIV_MON = Fact("delivmon", "Recibe entregas solo los lunes por la mañana", "routine", supersedes="delivfri")
BUYER_1 = Fact("buyer", "Su responsable de compras es Marta Ruiz", "contact")
BUYER_2 = Fact("buyer2", "Their buyer is John Smith", "contact", supersedes="buyer")
GOAL = Fact("goal", "Objetivo: pasar a producción en serie en 2027", "goal")
LATE = Fact("late", "Opinión: la entrega de la semana pasada llegó tarde", "feedback")
AERO = Fact("aero", "Trabaja en el sector aeroespacial", "fact")
AWAY_1 = Fact("away1", "Estará fuera este fin de semana", "fact")
AWAY_2 = Fact("away2", "Will be away next week", "fact")
CARD = Fact("card", "Paga con la tarjeta 4111 1111 1111 1111", "fact")
HEALTH = Fact("health", "Tiene diabetes y no puede tener reuniones a primera hora", "fact")
QTY = Fact("qty", "Suele pedir lotes de 50 a 200 piezas", "fact")

_SMALL_TALK_ES = ("Hola", "Gracias", "Vale, perfecto", "¡Genial!", "Buenos días", "Ok", "Muchas gracias")
_SMALL_TALK_EN = ("Hi", "Thanks", "Great, thanks", "Ok", "Perfect")
_DETAILS_ES = (
    "Serán {n} piezas",
    "¿Podéis hacerlo en {n} días laborables?",
    "Te paso el plano en STEP, revisión {n}",
    "El diámetro exterior es de {n} mm",
    "¿Qué acabado superficial me recomiendas para {n} unidades?",
    "Mejor {n} unidades, no más",
    "¿Cuánto costaría subir a {n} piezas?",
    "La rosca es M{n}",
)
_DETAILS_EN = (
    "It would be {n} parts",
    "Could you quote {n} units as well?",
    "Drawing revision {n} attached",
    "Outer diameter is {n} mm",
    "What lead time for {n} pieces?",
)
_CONFIRM_ES = "Perfecto, lo confirmo, adelante con el pedido"
_CONFIRM_EN = "Confirmed, please go ahead"

# Twelve sessions: (days before now, language, the turns that carry facts). Filler turns (quantities,
# drawings, questions, small talk) are added deterministically so that the conversation has 200 user turns.
_SESSIONS: tuple[tuple[int, str, tuple[Turn, ...]], ...] = (
    (
        40,
        "es",
        (
            _t("Hola, necesito presupuesto para 80 soportes. Prefiero aluminio 7075 para prototipos.", M1),
            _t("Trabajamos en el sector aeroespacial, así que siempre pedimos certificado 3.1.", AERO, CERT),
            _t("No podemos superar 1000 € por pedido.", B1),
            _t("Recuerda: no me sugieras acero 1045, nos dio problemas.", REJ_1045),
        ),
    ),
    (
        37,
        "es",
        (
            _t("Estaré fuera este fin de semana, contesto el lunes.", AWAY_1),
            _t("Necesitamos tolerancias de ±0.02 mm en los ejes.", TOL),
            _t("Para los pagos, cobrad a la tarjeta 4111 1111 1111 1111.", CARD),
        ),
    ),
    (
        34,
        "es",
        (
            _t("Como siempre, prefiero el 7075 para los prototipos.", M1_PARA),
            _t("Recibimos entregas solo los viernes por la mañana.", DELIV_FRI),
            _t("Nuestra responsable de compras es Marta Ruiz.", BUYER_1),
        ),
    ),
    (
        30,
        "es",
        (
            _t("Ojo, la entrega de la semana pasada llegó tarde.", LATE),
            _t("Necesitamos certificación ISO 9001 en todo.", ISO),
            _t("Recuerda que no me sugieras acero 1045.", REJ_1045_PARA),
        ),
    ),
    (
        27,
        "es",
        (
            _t("A partir de ahora el presupuesto es de 2000 € por pedido.", B2),
            _t("Prefiero anodizado negro para estas piezas.", ANOD),
            _t("Nuestro objetivo es pasar a producción en serie en 2027.", GOAL),
        ),
    ),
    (
        23,
        "es",
        (
            _t("Tengo diabetes y no puedo tener reuniones a primera hora, mejor por la tarde.", HEALTH),
            _t("Necesitamos el certificado 3.1 de material en todos los pedidos.", CERT_PARA),
            _t("Solemos pedir lotes de 50 a 200 piezas.", QTY),
        ),
    ),
    (
        20,
        "es",
        (
            _t("Ya no usamos 7075: ahora preferimos aluminio 6082 para prototipos.", M2),
            _t("No podemos superar 2000 € por pedido, como te dije.", B2),
        ),
    ),
    (
        16,
        "es",
        (
            _t("A partir de ahora recibimos entregas solo los lunes por la mañana.", DELIV_MON),
            _t("Prefiero anodizado negro, como siempre.", ANOD),
        ),
    ),
    (
        13,
        "en",
        (
            _t("Hi, I'm the new engineer. Remember we require EN 10204 3.1 material certificates.", CERT_EN),
            _t("Please don't suggest powder coating, our customer rejects it.", REJ_POWDER),
        ),
    ),
    (
        9,
        "en",
        (
            _t("From now on our buyer is John Smith.", BUYER_2),
            _t("We prefer black anodizing on all housings.", ANOD_EN),
        ),
    ),
    (
        5,
        "en",
        (
            _t("Going forward the budget is capped at 2500 EUR per order.", B3),
            _t("Don't suggest powder coating again, please.", REJ_POWDER),
        ),
    ),
    (
        1,
        "en",
        (
            _t("I'll be away next week, John will handle the order.", AWAY_2),
            _t("We require EN 10204 3.1 material certificates, as always.", CERT_EN),
        ),
    ),
)
TOTAL_TURNS = 200


def _build_script() -> list[tuple[int, list[Turn]]]:
    """The sessions with filler turns interleaved, 200 user turns in all, every session ending confirmed."""
    keyed = sum(len(turns) for _, _, turns in _SESSIONS)
    fillers = TOTAL_TURNS - keyed - len(_SESSIONS)  # one confirmation per session
    per_session = [
        fillers // len(_SESSIONS) + (1 if i < fillers % len(_SESSIONS) else 0) for i in range(len(_SESSIONS))
    ]
    script: list[tuple[int, list[Turn]]] = []
    counter = 0
    for (days_ago, lang, turns), n_fill in zip(_SESSIONS, per_session, strict=True):
        small = _SMALL_TALK_ES if lang == "es" else _SMALL_TALK_EN
        details = _DETAILS_ES if lang == "es" else _DETAILS_EN
        filler: list[Turn] = []
        for _ in range(n_fill):
            counter += 1
            # About one filler in three is small talk, the rest request details.
            if counter % 3 == 0:
                filler.append(Turn(small[counter % len(small)]))
            else:
                filler.append(Turn(details[counter % len(details)].format(n=10 + (counter * 7) % 190)))
        session: list[Turn] = [filler.pop(0)] if filler else []  # a greeting or a detail opens the session
        gap = max(1, len(filler) // max(1, len(turns)))
        for turn in turns:
            session.append(turn)
            session.extend(filler[:gap])
            del filler[:gap]
        session.extend(filler)
        session.append(Turn(_CONFIRM_ES if lang == "es" else _CONFIRM_EN, end_of_request=True))
        script.append((days_ago, session))
    assert sum(len(s) for _, s in script) == TOTAL_TURNS
    return script


SCRIPT = _build_script()
"""The conversation: (days before now, the session's user turns)."""


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
    tmp: Path | None = None
    server: EmbeddedPostgres | None = None
    if database_url is None:
        tmp = Path(tempfile.mkdtemp(prefix="memory-plugin-bench-"))
        server = EmbeddedPostgres(tmp, database="memory_bench")
        database_url = await asyncio.to_thread(server.start)
    try:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await migrate(conn)
        results = [
            await run_conversation(database_url, reuse_known_wording=False, embedding_dedup=False),
            await run_conversation(database_url, reuse_known_wording=False),
            await run_conversation(database_url, reuse_known_wording=True),
        ]
        return quality_table(results)
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.quality`."""
    table = asyncio.run(bench_quality())
    render([table], Console(width=240, soft_wrap=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
