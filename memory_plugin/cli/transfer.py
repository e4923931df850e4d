"""The commands that move or switch a user's memory, as the administrative role: `export` (one versioned
JSON document, docs/export.md), `import` (restored into a database that holds nothing of that user) and `pause`."""

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


@app.command("pause")
def pause_command(
    user: UserOption,
    resume: Annotated[bool, typer.Option("--resume", help="Resume the user's memory instead.")] = False,
    data_dir: DataDirOption = None,
) -> None:
    """Pause a user's memory (nothing new is stored about them; reads go on), or with --resume turn it back on.
    Kept in the database: every process of the application sees it at its next write."""
    from ..consent import ConsentStore

    uid = parse_user(user)

    async def switch(url: str) -> None:
        consent = ConsentStore(url)
        try:
            await consent.set_paused(uid, not resume)
        finally:
            await consent.close()

    run(switch(admin_url(load_settings(data_dir))))
    out().print(f"memory of user {uid} is {'on' if resume else 'paused: nothing new is stored'}")
