"""`memory-plugin`: the command line (demo, chat, inspect, status, db-url, stop, migrate, erase, maintain,
export, import, reembed).

    memory-plugin demo                      # two sessions; session 1 shapes the answer in session 2
    memory-plugin chat --user UUID          # talk to the budget agent
    memory-plugin inspect --user UUID       # what is stored about a user
    memory-plugin status                    # backend in use, database reachable, outage journal, job queue
    memory-plugin worker                    # run queued memory work (fact extraction) in this process
    psql "$(memory-plugin db-url)"          # open the database (the server stays up until `stop`)
    memory-plugin stop                      # stop the embedded database
    memory-plugin reembed                   # vectors of the current embedding model for every fact

Every command reads `MemorySettings` from `MEMORY_*` variables; `--data-dir DIR` means "the embedded
database in DIR" instead. Errors print one line on stderr and exit non-zero, without a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from uuid import UUID, uuid4

import psycopg
import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from agents.vocabulary import with_shop_vocabulary

from ..background import QueueStatus
from ..database import EmbeddedPostgres
from ..database.admin import ArchiveReport, MemoryAdmin
from ..database.embedded import stop_embedded
from ..database.migrations import migrate
from ..database.urls import masked_url
from ..errors import InvalidMemoryInputError, MemoryPluginError
from ..extraction.rules import RuleBasedExtractor
from ..manager import MemoryManager
from ..outage.journal import WriteJournal
from ..quality.decay import DecayPolicy
from ..rows import MemoryRecord
from ..runtime.connector import DatabaseConnector
from ..settings import MemorySettings
from ..store.status import BackendStatus

if TYPE_CHECKING:
    from workflows.budget_request import BudgetRequestWorkflow, BudgetTurn

# pydantic-ai, the agents and the workflow are imported by the commands that talk to a model (demo, chat):
# importing them costs ~1.1 s, which `status`, `inspect`, `db-url` and `stop` never need.

__all__ = ["DEMO_USER_ID", "app"]

T = TypeVar("T")

app = typer.Typer(
    name="memory-plugin",
    help="Conversational memory for pydantic-ai agents, persisted in Postgres/Supabase.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Use the embedded PostgreSQL kept in this directory (instead of MEMORY_DATABASE_URL / MEMORY_DATA_DIR).",
        file_okay=False,
    ),
]
UserOption = Annotated[str, typer.Option("--user", help="The user's id (a UUID, as Supabase Auth user ids are).")]


PIPED_WIDTH = 160
"""Width of output that is not a terminal (a file, a pipe) when COLUMNS is unset: rich's default of 80
squeezed tables until words broke (`confidenc/e`); 160 fits every table's columns, and text never wraps."""


def _out(*, stderr: bool = False) -> Console:
    # Built per command (not at import) so that COLUMNS and output redirection in effect at call time apply.
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, highlight=False, width=PIPED_WIDTH, soft_wrap=True)
    return console


def _err() -> Console:
    return _out(stderr=True)


def _fail(message: str, code: int = 1) -> typer.Exit:
    _err().print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _settings(data_dir: Path | None) -> MemorySettings:
    try:
        # The CLI is the machining shop's demo: its manager uses the shop's vocabulary.
        if data_dir is not None:
            return with_shop_vocabulary(MemorySettings(data_dir=data_dir.expanduser().resolve(), database_url=None))
        return with_shop_vocabulary(MemorySettings())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        raise _fail(f"invalid configuration ({where}): {first['msg']}") from None


def _user(value: str) -> UUID:
    try:
        return UUID(value.strip())
    except ValueError:
        raise _fail(f"--user must be a UUID (e.g. {DEMO_USER_ID}), got {value!r}", code=2) from None


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine, turning expected failures into one-line errors."""
    try:
        return asyncio.run(coro)
    except MemoryPluginError as exc:
        raise _fail(str(exc)) from None
    except (psycopg.Error, OSError, subprocess.SubprocessError) as exc:
        raise _fail(f"the database could not be started or reached: {exc}") from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:
        reason = _model_failure(exc)
        if reason is None:
            raise
        raise _fail(reason) from None


def _model_failure(exc: Exception) -> str | None:
    """The one-line message for pydantic-ai's failures (None for any other exception). pydantic-ai is only
    looked at if it was imported: it raised nothing otherwise, and importing it would cost ~1.1 s."""
    if "pydantic_ai.exceptions" not in sys.modules:
        return None
    from pydantic_ai.exceptions import AgentRunError, UserError

    if isinstance(exc, AgentRunError):
        return f"the model failed: {exc}"
    if isinstance(exc, UserError):  # pydantic-ai refusing a configuration, e.g. a model without its API key
        return f"the model cannot be used: {exc}"
    return None


@app.callback()
def main(
    ctx: typer.Context,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the plugin's 🧠 [Memory] logs.")] = False,
) -> None:
    """Conversational memory for pydantic-ai agents: demo, chat, inspect and open the database."""
    logger = logging.getLogger("memory_plugin")
    saved = (logger.level, logger.propagate)
    handler = RichHandler(console=_err(), show_path=False, show_time=False, markup=False)
    logger.addHandler(handler)
    # Quiet by default: the commands print the warnings that matter themselves (BudgetTurn.warnings).
    logger.setLevel(logging.INFO if verbose else logging.ERROR)
    logger.propagate = False

    def restore() -> None:
        # The CLI may run inside another program (tests, CliRunner): leave its logging as it was.
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]

    ctx.call_on_close(restore)


# --- demo --------------------------------------------------------------------------------------------------


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


def _records_table(records: list[MemoryRecord], title: str, *, demo: bool = False) -> Table:
    # SIMPLE_HEAD (no vertical rules) and folding columns keep every column visible at 80 columns.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("kind", style="magenta", overflow="fold")
    table.add_column("category", overflow="fold")
    table.add_column("content", overflow="fold", min_width=16, ratio=4)
    table.add_column("confidence", justify="right", overflow="fold")
    table.add_column("source", overflow="fold")
    if demo:
        table.add_column("provenance", justify="right", overflow="fold")  # messages it was learned from
    else:
        table.add_column("relevance_count", justify="right", overflow="fold")
        table.add_column("updated_at", overflow="fold")
    for r in records:
        row = [r.kind, r.category, escape(r.content), f"{r.confidence:.2f}", r.source]
        if demo:
            row.append(str(len(r.source_message_ids)))
        else:
            row.append(str(r.relevance_count))
            row.append(r.updated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"))
        table.add_row(*row)
    return table


async def _demo(settings: MemorySettings, console: Console) -> None:
    from agents.fact_extractor import build_fact_extractor
    from workflows.budget_request import BudgetRequestWorkflow

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
        console.print(_records_table(stored + others, "🧠 Lo que la memoria aprendió en la sesión 1", demo=True))

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


@app.command()
def demo(data_dir: DataDirOption = None) -> None:
    """A scripted two-session budget request: what the customer says in session 1 shapes session 2.

    Runs offline (deterministic models, rule-based extraction) on the embedded database.
    """
    _run(_demo(_settings(data_dir), _out()))


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
        raise _fail(
            f"MEMORY_AGENT_MODEL={model} cannot be used: {exc} "
            "(unset MEMORY_AGENT_MODEL and OPENAI_API_KEY to chat with the offline models)"
        ) from None


async def _chat(settings: MemorySettings, user: UUID, session: str, console: Console) -> None:
    from agents.fact_extractor import build_fact_extractor
    from agents.models import resolve_agent_model
    from workflows.budget_request import BudgetRequestWorkflow

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


@app.command()
def chat(
    user: UserOption,
    session: Annotated[str | None, typer.Option("--session", help="Conversation id (default: a new one).")] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Talk to the budget agent with memory (a real model when MEMORY_AGENT_MODEL or OPENAI_API_KEY is set)."""
    from agents.models import resolve_agent_model

    uid = _user(user)
    settings = _settings(data_dir)
    _check_model(resolve_agent_model(settings))
    _run(_chat(settings, uid, session or f"chat-{uuid4().hex[:8]}", _out()))


# --- inspect ------------------------------------------------------------------------------------------------


async def _inspect(
    settings: MemorySettings, user: UUID, limit: int, session: str | None
) -> tuple[list[MemoryRecord], str | None]:
    settings = settings.model_copy(update={"background_worker": False})  # looks only: runs no queued job
    async with MemoryManager.open(settings, extractor=RuleBasedExtractor()) as memory:
        records = await memory.list_memory(user, limit=limit)
        if session is None:
            return records, None
        from ..context.builder import ContextBuilder  # imports pydantic-ai: only for the budget report

        # How the token budget would be spent on this user's next turn in that session.
        builder = await ContextBuilder.open(memory, settings, database_url=memory.database_url)
        try:
            built = await builder.build(session, user)
        finally:
            await builder.close()
        return records, built.report.describe()


@app.command("inspect")
def inspect_memory(
    user: UserOption,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Most recent items to show.")] = 100,
    session: Annotated[
        str | None, typer.Option("--session", help="Also show how the next turn of this session spends the budget.")
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Print what is stored about a user: facts, preferences, projects and patterns; with --session, the
    token budget report of that session's next turn (profile, slots, summary, facts, messages)."""
    uid = _user(user)
    records, report = _run(_inspect(_settings(data_dir), uid, limit, session))
    table = _records_table(records, f"Memory of user {uid} ({len(records)} items)")
    if not records:
        table.caption = "Nothing is stored for this user yet."
    _out().print(table)
    if report is not None:
        _out().print(f"context budget of session {escape(str(session))}: {escape(report)}", soft_wrap=True)


# --- status -----------------------------------------------------------------------------------------------


async def _status(settings: MemorySettings) -> BackendStatus:
    # Only looks: no worker here, or the queued jobs would be run with this command's offline extractor.
    settings = settings.model_copy(update={"background_worker": False})
    async with MemoryManager.open(settings, extractor=RuleBasedExtractor()) as memory:
        return await memory.backend_status()


@app.command("status")
def status_command(data_dir: DataDirOption = None) -> None:
    """Which backend serves memory, whether the database answers, and the outage journal. Opening the
    memory replays what an earlier run journaled, if the database answers."""
    status = _run(_status(_settings(data_dir)))
    table = Table(title="Memory backend", box=box.SIMPLE_HEAD)
    table.add_column("field")
    table.add_column("value")
    for field in dataclasses.fields(status):
        if field.name != "queue":
            table.add_row(field.name, escape(str(getattr(status, field.name))))
    _queue_rows(table, status.queue)
    _out().print(table)


def _queue_rows(table: Table, queue: QueueStatus | None) -> None:
    """The background extraction queue's lines of `status`."""
    if queue is None:
        table.add_row("queue", "unreadable (see the log)")
        return
    age = queue.oldest_pending_age(datetime.now(UTC))
    table.add_row(
        "queue",
        f"{queue.backend} ({'durable, shared by workers' if queue.backend == 'postgres' else 'this process only'})",
    )
    table.add_row(
        "queue depth", f"{queue.depth} ({queue.pending} pending, {queue.running} running, {queue.retrying} retrying)"
    )
    table.add_row("queue oldest pending", "-" if age is None else f"{age:.1f} s")
    table.add_row("queue failed attempts", str(queue.failed_attempts))
    table.add_row("queue dead jobs", f"{queue.dead}" + (" (memory-plugin worker --retry-dead)" if queue.dead else ""))


# --- worker ------------------------------------------------------------------------------------------------


async def _worker(settings: MemorySettings, *, retry_dead: bool, drain: bool) -> None:
    from ..context.builder import ContextBuilder

    settings = settings.model_copy(update={"background_worker": True})
    context: ContextBuilder | None = None
    try:
        async with MemoryManager.open(settings) as memory:
            queue = await memory.queue_status()
            if queue.backend != "postgres":
                raise _fail(
                    "the worker needs the Postgres queue: set MEMORY_DATABASE_URL to the application's database"
                )
            if retry_dead:
                revived = await memory.retry_dead_jobs()
                _out().print(f"{revived} dead jobs queued again")
                return
            # The facts its jobs write patch the users' slots, and a due rolling summary is written in the
            # job's own call, as in the application's process.
            context = await ContextBuilder.open(memory, settings, database_url=memory.database_url)
            context.follow(memory.extraction)
            _out().print(f"worker running ({settings.background_concurrency} jobs at a time); Ctrl-C stops it")
            while True:
                await asyncio.sleep(settings.background_poll_seconds)
                if drain and not (await memory.queue_status()).depth:
                    break
    finally:
        # Closed after the manager, whose exit lets running jobs finish (and patch the slots) first.
        if context is not None:
            await context.close()


@app.command("worker")
def worker_command(
    data_dir: DataDirOption = None,
    retry_dead: Annotated[
        bool, typer.Option("--retry-dead", help="Queue the dead jobs again (fresh attempts), then exit.")
    ] = False,
    drain: Annotated[bool, typer.Option("--drain", help="Exit once the queue is empty.")] = False,
) -> None:
    """Run memory work queued by applications (fact extraction) in this process, alongside or instead of their
    own workers (MEMORY_BACKGROUND_WORKER=false). Several workers share the queue; each job runs once."""
    _run(_worker(_settings(data_dir), retry_dead=retry_dead, drain=drain))


# --- db-url -----------------------------------------------------------------------------------------------


async def _migrate(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)


def _start_embedded(settings: MemorySettings) -> str:
    url = EmbeddedPostgres.from_settings(settings, keep_running=True).start()
    if settings.auto_migrate:
        _run(_migrate(url))
    return url


@app.command("db-url")
def db_url(data_dir: DataDirOption = None) -> None:
    """Print the database URL, starting the embedded database if needed: it then stays up until
    `memory-plugin stop`, whatever other commands start and end meanwhile.

    psql "$(memory-plugin db-url)"
    """
    settings = _settings(data_dir)
    if settings.database_url is not None:
        typer.echo(settings.database_url.get_secret_value())
        return
    try:
        url = _start_embedded(settings)
    except (psycopg.Error, OSError, subprocess.SubprocessError) as exc:
        raise _fail(f"the embedded database could not be started: {exc}") from None
    typer.echo(url)


@app.command("stop")
def stop(data_dir: DataDirOption = None) -> None:
    """Stop the embedded database of the data directory (started by `db-url`, or left by a crash). Processes
    still using it lose their connections; a running manager (`chat`, an application) restarts it, as it
    owns the server while it runs."""
    settings = _settings(data_dir)
    try:
        was_running = stop_embedded(settings.data_dir)
    except (OSError, subprocess.SubprocessError) as exc:
        raise _fail(f"the embedded database could not be stopped: {exc}") from None
    where = settings.data_dir / "postgres"
    _out().print(f"stopped the embedded database in {where}" if was_running else f"no server running in {where}")


# --- service path: migrate, erase ------------------------------------------------------------------------


def _admin_url(settings: MemorySettings) -> str:
    """The administrative connection: MEMORY_ADMIN_DATABASE_URL, else MEMORY_DATABASE_URL, else embedded."""
    for url in (settings.admin_database_url, settings.database_url):
        if url is not None:
            return url.get_secret_value()
    try:
        return EmbeddedPostgres.from_settings(settings).start()  # stops at exit if this process started it
    except (psycopg.Error, OSError, subprocess.SubprocessError) as exc:
        raise _fail(f"the embedded database could not be started: {exc}") from None


async def _admin_migrate(url: str) -> list[str]:
    async with await MemoryAdmin.connect(url) as admin:
        return await admin.migrate()


@app.command("migrate")
def migrate_command(data_dir: DataDirOption = None) -> None:
    """Apply pending migrations as the administrative role (MEMORY_ADMIN_DATABASE_URL)."""
    applied = _run(_admin_migrate(_admin_url(_settings(data_dir))))
    _out().print(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else " (up to date)"))


async def _erase(url: str, user: UUID) -> int:
    async with await MemoryAdmin.connect(url) as admin:
        return await admin.erase_user(user)


@app.command("erase")
def erase(
    user: UserOption,
    yes: Annotated[bool, typer.Option("--yes", help="Do it without asking.")] = False,
    data_dir: DataDirOption = None,
) -> None:
    """Delete everything stored about a user (right to erasure), as the administrative role."""
    uid = _user(user)
    if not yes and not typer.confirm(f"Erase all memory of user {uid}?"):
        raise typer.Exit(1)
    settings = _settings(data_dir)
    deleted = _run(_erase(_admin_url(settings), uid))
    # Writes journaled during an outage must not bring the user back at the next replay.
    journal = WriteJournal.for_database(settings.data_dir, DatabaseConnector(settings).identity)
    pending = journal.drop_user(uid).items
    sessions = _erase_redis_sessions(settings, uid)
    extra = f" and {sessions} Redis session(s)" if sessions is not None else ""
    _out().print(f"erased {deleted} row(s), {pending} pending write(s){extra} of user {uid}")


def _erase_redis_sessions(settings: MemorySettings, user: UUID) -> int | None:
    """Short-term sessions kept in Redis are outside the database: erase them too (None: not on Redis)."""
    if settings.session_backend != "redis":
        return None
    from ..session.redis_store import redis_sessions_from_settings  # the `redis` extra

    try:
        sessions = redis_sessions_from_settings(settings)
        try:
            return sessions.drop_user(user)
        finally:
            sessions.close()
    except MemoryPluginError as exc:
        raise _fail(f"the database rows are erased, but not the Redis sessions: {exc}") from None


@app.command("journal")
def journal_command(
    readmit: Annotated[
        bool, typer.Option("--readmit", help="Move the set-aside writes back into the journal (all, or --write-id).")
    ] = False,
    write_ids: Annotated[
        list[str] | None, typer.Option("--write-id", help="Only this set-aside write (repeatable).")
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Show the outage journal (writes waiting for the database, and writes set aside for review: refused by
    the database, or unsigned lines of an older journal); with --readmit, move reviewed writes back so they
    are replayed when a manager next reaches the database."""
    settings = _settings(data_dir)
    journal = WriteJournal.for_database(settings.data_dir, DatabaseConnector(settings).identity)
    wanted: set[UUID] | None = None
    if write_ids:
        try:
            wanted = {UUID(value) for value in write_ids}
        except ValueError:
            raise _fail("--write-id takes the write id (a UUID) printed by `memory-plugin journal`") from None
    console = _out()
    if readmit:
        back = journal.readmit(wanted)
        console.print(f"readmitted {len(back)} write(s); they are replayed when a manager next reaches the database")
        return
    console.print(f"journal {journal.path}: {len(journal.entries())} write(s) waiting for the database")
    rejected = journal.rejected()
    table = Table(title=f"set aside for review ({len(rejected)})", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("write id", "user", "items", "reason"):
        table.add_column(column)
    for entry, reason in rejected:
        shown = reason or "not signed with this installation's key"
        table.add_row(str(entry.write_id), str(entry.user_id), str(len(entry.items)), shown)
    if rejected:
        console.print(table)


async def _maintain(url: str, settings: MemorySettings) -> ArchiveReport:
    policy = DecayPolicy(half_life_days=dict(settings.half_life_days), floor=settings.decay_floor)
    async with await MemoryAdmin.connect(url) as admin:
        return await admin.archive_decayed(policy)


@app.command("maintain")
def maintain(data_dir: DataDirOption = None) -> None:
    """Archive facts whose decayed confidence fell below MEMORY_DECAY_FLOOR, and expired facts (all users), as
    the administrative role. Optional: they are already hidden from every context; this shrinks the index."""
    settings = _settings(data_dir)
    report = _run(_maintain(_admin_url(settings), settings))
    _out().print(f"archived {report.decayed} decayed and {report.expired} expired fact(s)")


# --- export, import (memory_plugin/export/cli_commands.py) ---------------------------------------------------


@app.command("export")
def export_command(
    user: UserOption,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file (default: stdout).", dir_okay=False)
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Write everything stored about a user as one versioned JSON document (docs/export.md), as the
    administrative role: memory-plugin export --user UUID > user.json"""
    from ..export.cli_commands import export_to

    uid = _user(user)
    written = _run(export_to(_admin_url(_settings(data_dir)), uid, output))
    if output is not None:
        _err().print(f"exported user {uid} to {escape(str(output))} ({written} characters)")


@app.command("import")
def import_command(
    path: Annotated[Path, typer.Argument(help="An export written by `memory-plugin export` (`-` for stdin).")],
    data_dir: DataDirOption = None,
) -> None:
    """Restore an export into a database that holds nothing of its user (erase the user first to replace their
    memory), as the administrative role: all of it or nothing."""
    from ..export.cli_commands import import_from, read_export_file

    try:
        raw = read_export_file(path)
    except MemoryPluginError as exc:
        raise _fail(str(exc)) from None
    report = _run(import_from(_admin_url(_settings(data_dir)), raw))
    counts = ", ".join(f"{n} {name}" for name, n in report.rows.items() if n)
    _out().print(f"imported {report.total} row(s) of user {report.user_id}" + (f": {counts}" if counts else ""))
    _out().print(f"vectors of the embedding model in use: memory-plugin reembed --user {report.user_id}")


# --- embeddings: reembed ------------------------------------------------------------------------------------


async def _reembed(settings: MemorySettings, user: UUID | None, console: Console) -> tuple[int, int]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ..embeddings.reembed import reembed_user, users_with_backlog

    async with MemoryManager.open(settings) as memory:
        embedder = memory.embedder
        if embedder is None:
            raise _fail("no embedding model configured (MEMORY_EMBEDDING_MODEL is `none`, or `auto` found none)")
        if user is not None:
            backlog = [(user, len(await memory.store.embedding_backlog(user, embedder.name, limit=1_000_000)))]
        else:
            url = _admin_url(settings) if settings.admin_database_url or settings.database_url else memory.database_url
            assert url is not None
            backlog = await users_with_backlog(url, embedder.name)
        total = sum(n for _, n in backlog)
        stored = 0
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task(f"embedding with {embedder.name}", total=total)
            for uid, _ in backlog:
                stored += await reembed_user(
                    memory.store, embedder, uid, on_progress=lambda n: progress.advance(task, n)
                )
        return stored, len(backlog)


@app.command("reembed")
def reembed(
    user: Annotated[str | None, typer.Option("--user", help="Only this user (default: every user).")] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Give every fact a vector of the current embedding model (MEMORY_EMBEDDING_MODEL), with a progress bar.

    Run it after changing the model: until then facts embedded by the old one are found by text only (vectors
    of two models are never compared). Listing every user goes through the service path
    (MEMORY_ADMIN_DATABASE_URL); the vectors are written as each user, under RLS.
    """
    uid = _user(user) if user is not None else None
    console = _out()
    stored, users = _run(_reembed(_settings(data_dir), uid, console))
    console.print(f"embedded {stored} fact(s) of {users} user(s)")


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    data_dir: DataDirOption = None,
) -> None:
    """Serve the REST API for chats and memory (needs the `api` extra and MEMORY_JWT_SECRET or MEMORY_JWT_JWKS_URL)."""
    try:
        from ..api.server import serve as serve_api
    except ImportError as exc:
        raise _fail(f"the API needs its extra: pip install 'memory-plugin[api]' ({exc})") from None
    try:
        serve_api(_settings(data_dir), host=host, port=port)
    except MemoryPluginError as exc:
        raise _fail(str(exc)) from None


def _reflow(doc: str) -> str:
    """A docstring as help text: the lines of a paragraph joined (source wraps at 120 columns; the help
    wraps at the terminal's width: keeping both broke lines mid-sentence), paragraphs kept."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


for _command in app.registered_commands:
    if _command.help is None and _command.callback is not None and _command.callback.__doc__:
        _command.help = _reflow(_command.callback.__doc__)


if __name__ == "__main__":  # pragma: no cover
    app()
