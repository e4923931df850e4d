"""The commands that read or refresh a user's stored memory: `inspect` and `reembed`."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape

from ..extraction.rules import RuleBasedExtractor
from ..manager import MemoryManager
from ..rows import MemoryRecord
from ..settings import MemorySettings
from .common import DataDirOption, UserOption, app, fail, load_settings, out, parse_user, records_table, run
from .database import admin_url

__all__ = ["inspect_memory", "reembed"]


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
    uid = parse_user(user)
    records, report = run(_inspect(load_settings(data_dir), uid, limit, session))
    table = records_table(records, f"Memory of user {uid} ({len(records)} items)")
    if not records:
        table.caption = "Nothing is stored for this user yet."
    out().print(table)
    if report is not None:
        out().print(f"context budget of session {escape(str(session))}: {escape(report)}", soft_wrap=True)


async def _reembed(settings: MemorySettings, user: UUID | None, console: Console) -> tuple[int, int]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ..embeddings.reembed import users_with_backlog

    async with MemoryManager.open(settings) as memory:
        embedder = memory.embedder
        if embedder is None:
            raise fail("no embedding model configured (MEMORY_EMBEDDING_MODEL is `none`, or `auto` found none)")
        if user is not None:
            backlog = [(user, await memory.embedding_backlog(user))]
        else:
            url = admin_url(settings) if settings.admin_database_url or settings.database_url else memory.database_url
            assert url is not None
            backlog = await users_with_backlog(url, embedder.name)
        total = sum(n for _, n in backlog)
        stored = 0
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task(f"embedding with {embedder.name}", total=total)
            for uid, _ in backlog:
                stored += await memory.reembed(uid, on_progress=lambda n: progress.advance(task, n))
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
    uid = parse_user(user) if user is not None else None
    console = out()
    stored, users = run(_reembed(load_settings(data_dir), uid, console))
    console.print(f"embedded {stored} fact(s) of {users} user(s)")
