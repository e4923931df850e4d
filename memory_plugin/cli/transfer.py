"""The commands that move a user's memory between databases, as the administrative role: `export` (one versioned
JSON document, docs/export.md) and `import` (restored into a database that holds nothing of that user)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..errors import MemoryPluginError
from .common import DataDirOption, UserOption, app, err, fail, load_settings, out, parse_user, run
from .database import admin_url

__all__ = ["export_command", "import_command"]


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

    uid = parse_user(user)
    written = run(export_to(admin_url(load_settings(data_dir)), uid, output))
    if output is not None:
        err().print(f"exported user {uid} to {escape(str(output))} ({written} characters)")


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
        raise fail(str(exc)) from None
    report = run(import_from(admin_url(load_settings(data_dir)), raw))
    counts = ", ".join(f"{n} {name}" for name, n in report.rows.items() if n)
    out().print(f"imported {report.total} row(s) of user {report.user_id}" + (f": {counts}" if counts else ""))
    out().print(f"vectors of the embedding model in use: memory-plugin reembed --user {report.user_id}")
