"""What every command shares: the `app`, the console, settings from the environment (or `--data-dir`), the
`--user` option, and running a command's coroutine with one-line errors instead of tracebacks.

Commands of an application (the machining shop's `demo` and `chat`) are registered on the same `app` from the
application's side (`cli/plugins.py`) and use these helpers.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import subprocess
import sys
from collections.abc import Coroutine
from contextvars import ContextVar
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any, TypeVar
from uuid import UUID

import psycopg
import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from ..errors import MemoryPluginError
from ..quality.vocabulary import Vocabulary
from ..rows import MemoryRecord
from ..settings import MemorySettings

__all__ = [
    "PIPED_WIDTH",
    "DataDirOption",
    "UserOption",
    "app",
    "err",
    "fail",
    "load_settings",
    "load_vocabulary",
    "out",
    "parse_user",
    "records_table",
    "run",
]

T = TypeVar("T")

_GLOBAL_FLAGS = frozenset({"--verbose", "-v"})
_GROUP_DATA_DIR: ContextVar[Path | None] = ContextVar("memory_plugin_group_data_dir", default=None)


class _OptionsEitherSide(TyperGroup):
    """The command group that also takes its own flags after the subcommand (`memory-plugin status --verbose`
    as `memory-plugin --verbose status`): they are moved before it, up to a `--`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        moved = [a for a in args[:end] if a in _GLOBAL_FLAGS]
        rest = [a for a in args[:end] if a not in _GLOBAL_FLAGS]
        return super().parse_args(ctx, moved + rest + args[end:])


app = typer.Typer(
    cls=_OptionsEitherSide,
    name="memory-plugin",
    help="Conversational memory for pydantic-ai agents, persisted in Postgres/Supabase.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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

_EXAMPLE_USER = "5f0c7a1e-0000-4000-8000-00000000de70"


def out(*, stderr: bool = False) -> Console:
    """The console of a command (stdout, or stderr)."""
    # Built per command (not at import) so that COLUMNS and output redirection in effect at call time apply.
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, highlight=False, width=PIPED_WIDTH, soft_wrap=True)
    return console


def err() -> Console:
    """The console on stderr."""
    return out(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `error: message` on stderr; returns the exit to raise."""
    err().print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def load_vocabulary(reference: str) -> Vocabulary:
    """The `Vocabulary` named `package.module:NAME` (`MEMORY_VOCABULARY_MODULE`)."""
    module_name, _, name = reference.partition(":")
    try:
        value = getattr(importlib.import_module(module_name), name or "VOCABULARY")
    except (ImportError, AttributeError) as exc:
        raise fail(f"MEMORY_VOCABULARY_MODULE={reference} names no vocabulary ({exc})") from None
    if not isinstance(value, Vocabulary):
        raise fail(f"MEMORY_VOCABULARY_MODULE={reference} is a {type(value).__name__}, not a Vocabulary")
    return value


def load_settings(data_dir: Path | None) -> MemorySettings:
    """`MemorySettings` from the environment (`--data-dir`: the embedded database in that directory), with the
    vocabulary `MEMORY_VOCABULARY_MODULE` names (the generic one by default)."""
    data_dir = data_dir if data_dir is not None else _GROUP_DATA_DIR.get()  # `memory-plugin --data-dir DIR command`
    try:
        if data_dir is not None:
            settings = MemorySettings(data_dir=data_dir.expanduser().resolve(), database_url=None)
        else:
            settings = MemorySettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        raise fail(f"invalid configuration ({where}): {first['msg']}") from None
    if settings.vocabulary_module:
        settings = settings.model_copy(update={"vocabulary": load_vocabulary(settings.vocabulary_module)})
    return settings


def parse_user(value: str) -> UUID:
    """`--user` as a UUID, or exit 2 with an example."""
    try:
        return UUID(value.strip())
    except ValueError:
        raise fail(f"--user must be a UUID (e.g. {_EXAMPLE_USER}), got {value!r}", code=2) from None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine, turning expected failures into one-line errors."""
    try:
        return asyncio.run(coro)
    except MemoryPluginError as exc:
        raise fail(str(exc)) from None
    except (psycopg.Error, OSError, subprocess.SubprocessError) as exc:
        raise fail(f"the database could not be started or reached: {exc}") from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:
        reason = _model_failure(exc)
        if reason is None:
            raise
        raise fail(reason) from None


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


def records_table(records: list[MemoryRecord], title: str, *, demo: bool = False) -> Table:
    """Stored memory as a table (`demo`: with how many messages each item was learned from)."""
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


@app.callback()
def main(
    ctx: typer.Context,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the plugin's 🧠 [Memory] logs.")] = False,
    data_dir: DataDirOption = None,
) -> None:
    """Conversational memory for pydantic-ai agents: inspect memory, run workers and the API, open the database.
    --verbose and --data-dir may also follow the command."""
    data_dir_token = _GROUP_DATA_DIR.set(data_dir)
    logger = logging.getLogger("memory_plugin")
    saved = (logger.level, logger.propagate)
    handler = RichHandler(console=err(), show_path=False, show_time=False, markup=False)
    logger.addHandler(handler)
    # Quiet by default: the commands print the warnings that matter themselves.
    logger.setLevel(logging.INFO if verbose else logging.ERROR)
    logger.propagate = False
    # The pool logs every failed connection attempt (a dozen lines while waiting for a server that is down);
    # the command's error names the cause once.
    pool_logger = logging.getLogger("psycopg.pool")
    pool_level = pool_logger.level
    pool_logger.setLevel(logging.DEBUG if verbose else logging.CRITICAL)

    def restore() -> None:
        # The CLI may run inside another program (tests, CliRunner): leave its logging as it was.
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        _GROUP_DATA_DIR.reset(data_dir_token)
        pool_logger.setLevel(pool_level)

    ctx.call_on_close(restore)
