"""The machining shop's commands on the `memory-plugin` command line: `demo` (a scripted two-session budget
request, offline) and `chat` (talk to the budget agent). The library knows no application: these are registered
from here (`register`), named in the repository's `pyproject.toml` (`[tool.memory-plugin] cli-plugins`), which
the command line reads when run from a checkout (`memory_plugin/cli/plugins.py`).

pydantic-ai, the agents and the workflow are imported by the commands themselves: importing them costs ~1.1 s,
which the library's quick commands (`status`, `inspect`, `db-url`) never pay.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from uuid import UUID, uuid4

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from agents.vocabulary import with_shop_vocabulary
from memory_plugin.cli.common import (
    DataDirOption,
    UserOption,
    fail,
    load_settings,
    out,
    parse_user,
    records_table,
    run,
)
from memory_plugin.database.urls import masked_url
from memory_plugin.errors import InvalidMemoryInputError, MemoryPluginError
from memory_plugin.manager import MemoryManager
from memory_plugin.settings import MemorySettings

if TYPE_CHECKING:
    from workflows.budget_request import BudgetRequestWorkflow, BudgetTurn

__all__ = ["DEMO_SESSION_1", "DEMO_SESSION_2", "DEMO_USER_ID", "chat", "demo", "register"]

DEMO_USER_ID = UUID("5f0c7a1e-0000-4000-8000-00000000de70")
"""The demo's customer. The demo deletes this user's memory first, so every run starts the same way."""

DEMO_SESSION_1 = [
    "Hola, necesito presupuesto para 50 piezas de fresado CNC con tolerancia ±0.05 mm.",
    "Prefiero aluminio 7075 para los prototipos.",
    "Necesitamos certificación ISO 9001 en todas las piezas.",
    "No puedo superar 1500€ por pedido.",
    "Perfecto, lo confirmo: adelante con el pedido para el viernes.",
]
DEMO_SESSION_2 = "Hola, necesito otras 30 piezas como las anteriores"

_EXIT_WORDS = {"exit", "quit", "salir", ":q"}


def register(app: typer.Typer) -> None:
    """Add `demo` and `chat` to the `memory-plugin` command line (once: a second call adds nothing)."""
    if any(command.name in {"demo", "chat"} for command in app.registered_commands):
        return
    app.command("demo")(demo)
    app.command("chat")(chat)


def _shop_settings(data_dir: Path | None) -> MemorySettings:
    """The command line's settings with the shop's vocabulary (materials, finishes and their slots)."""
    return with_shop_vocabulary(load_settings(data_dir))


def _print_turn(console: Console, message: str, turn: BudgetTurn) -> None:
    console.print(f"[bold cyan]👤 Cliente:[/] {escape(message)}")
    console.print(f"[bold green]🤖 Arkcutt:[/] {escape(turn.reply)}")
    cls = turn.classification
    notes = [f"intent: {cls.intent}"]
    notes += [f"{kind}: {', '.join(values)}" for kind, values in cls.entities.items()]
    if turn.facts_stored:
        notes.append(f"🧠 {len(turn.facts_stored)} hecho(s) guardado(s)")
    if cls.request_complete:
        notes.append("proyecto registrado")
    console.print(f"[dim]   {escape(' · '.join(notes))}[/]")
    for warning in turn.warnings:
        console.print(f"[yellow]   ⚠ {escape(warning)}[/]")


def _own_the_output() -> None:
    """No pydantic-ai first-run banner: it is printed to a terminal at the first agent run, i.e. between
    two lines of the conversation these commands print."""
    import pydantic_ai

    pydantic_ai.BANNER_ENABLED = False


async def _demo(settings: MemorySettings, console: Console) -> None:
    from agents.fact_extractor import build_fact_extractor
    from workflows.budget_request import BudgetRequestWorkflow

    _own_the_output()

    user = DEMO_USER_ID
    # The demo is offline by design (rule-based extraction, deterministic models), whatever is configured.
    async with MemoryManager.open(settings, extractor=build_fact_extractor(None)) as memory:
        for record in await memory.list_memory(user):
            await memory.forget(user, record.id)
        # Inline extraction: the demo shows each turn's facts as that turn learns them.
        workflow = BudgetRequestWorkflow.build(memory, settings, offline=True, extract_inline=True)

        console.rule("[bold]Sesión 1[/] · una solicitud de presupuesto")
        for message in DEMO_SESSION_1:
            turn = await workflow.handle(session_id="demo-session-1", user_id=user, message=message)
            _print_turn(console, message, turn)

        stored = [r for r in await memory.list_memory(user) if r.kind in ("fact", "preference")]
        others = [r for r in await memory.list_memory(user) if r.kind not in ("fact", "preference")]
        console.print()
        console.print(records_table(stored + others, "🧠 Lo que la memoria aprendió en la sesión 1", demo=True))

        console.print()
        console.rule("[bold]Sesión 2[/] · una semana después, otra conversación")
        turn = await workflow.handle(session_id="demo-session-2", user_id=user, message=DEMO_SESSION_2)
        console.print(
            Panel(
                escape(turn.memory_block or "(empty)"),
                title="🧠 Memoria que recibió el modelo (sesión 2)",
                title_align="left",
                border_style="blue",
            )
        )
        _print_turn(console, DEMO_SESSION_2, turn)

        console.print()
        url = memory.database_url
        if url:
            query = f"select kind, category, content, confidence from user_memory where user_id = '{user}'"
            console.print("[bold]Inspect the table:[/]")
            console.print(f'  psql "{escape(masked_url(url))}" -c "{escape(query)}"', soft_wrap=True)
            console.print(
                "[dim]  (the embedded server stops when the last command using it exits; `memory-plugin db-url` "
                "starts it again and keeps it running until `memory-plugin stop`)[/]",
                soft_wrap=True,
            )
        console.print(f"  memory-plugin inspect --user {user}", soft_wrap=True)


def demo(data_dir: DataDirOption = None) -> None:
    """A scripted two-session budget request: what the customer says in session 1 shapes session 2.

    Runs offline (deterministic models, rule-based extraction) on the embedded database.
    """
    run(_demo(_shop_settings(data_dir), out()))


# --- chat -----------------------------------------------------------------------------------------------


PROMPT = "[bold cyan]tú › [/]"


def _check_model(model: str | None) -> None:
    """Fail before the conversation starts when pydantic-ai cannot build the configured model (unknown
    provider, missing API key), instead of a traceback at the first message."""
    if model is None:
        return
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.models import infer_model

    try:
        infer_model(model)
    except UserError as exc:
        raise fail(
            f"MEMORY_AGENT_MODEL={model} cannot be used: {exc} "
            "(unset MEMORY_AGENT_MODEL and OPENAI_API_KEY to chat with the offline models)"
        ) from None


async def _chat(settings: MemorySettings, user: UUID, session: str, console: Console) -> None:
    from agents.fact_extractor import build_fact_extractor
    from agents.models import resolve_agent_model
    from workflows.budget_request import BudgetRequestWorkflow

    _own_the_output()
    model = resolve_agent_model(settings)
    async with MemoryManager.open(settings, extractor=build_fact_extractor(settings.extraction_model)) as memory:
        workflow = BudgetRequestWorkflow.build(memory, settings)
        console.print(
            f"[dim]user {user} · session {escape(session)} · model {escape(model or 'offline')} · "
            "exit with Ctrl-D, Ctrl-C, 'exit' or 'quit'[/]"
        )
        try:
            await _chat_loop(workflow, user, session, console)
        finally:
            # The conversation is over (end of input, an exit word, Ctrl-C at the prompt or during an answer):
            # what the extraction policy had not reached yet is extracted now.
            await memory.remember_from_session(session, user)


def _read_message(console: Console) -> str | None:
    """The next line the user typed; None at the end of input or on Ctrl-C (both end the conversation).

    Not a terminal (piped input): the line is echoed after the prompt, so the transcript reads as a
    conversation instead of prompts run together.
    """
    # asyncio.run's own SIGINT handler only cancels the task at its next await: a blocking read would ignore
    # the first Ctrl-C. While reading, Ctrl-C raises KeyboardInterrupt here, as in any terminal program.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    try:
        if sys.stdin.isatty():
            return console.input(PROMPT)
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        line = line.rstrip("\r\n")
        console.print(PROMPT + escape(line), soft_wrap=True)
        return line
    except (EOFError, KeyboardInterrupt):
        console.print()
        return None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


async def _chat_loop(workflow: BudgetRequestWorkflow, user: UUID, session: str, console: Console) -> None:
    from pydantic_ai.exceptions import AgentRunError

    while True:
        message = _read_message(console)
        if message is None or message.strip().lower() in _EXIT_WORDS:
            return
        if not message.strip():
            continue
        try:
            turn = await workflow.handle(session_id=session, user_id=user, message=message)
        except AgentRunError as exc:
            # One failed answer should not end the conversation.
            console.print(f"[red]the model failed: {escape(str(exc))}[/]")
            continue
        except (InvalidMemoryInputError, ValidationError) as exc:  # e.g. a NUL byte: say why, go on
            reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            console.print(f"[red]that message was not used: {escape(reason)}; type it again[/]")
            continue
        except MemoryPluginError as exc:
            console.print(f"[red]{escape(str(exc))}[/]")
            continue
        console.print(f"[bold green]arkcutt ›[/] {escape(turn.reply)}", soft_wrap=True)
        for warning in turn.warnings:
            console.print(f"[yellow]⚠ {escape(warning)}[/]", soft_wrap=True)


def chat(
    user: UserOption,
    session: Annotated[str | None, typer.Option("--session", help="Conversation id (default: a new one).")] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Talk to the budget agent with memory (a real model when MEMORY_AGENT_MODEL or OPENAI_API_KEY is set)."""
    from agents.models import resolve_agent_model

    uid = parse_user(user)
    settings = _shop_settings(data_dir)
    _check_model(resolve_agent_model(settings))
    run(_chat(settings, uid, session or f"chat-{uuid4().hex[:8]}", out()))
