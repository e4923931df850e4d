"""The commands that report the state of the memory's machinery: `status` (backend, database, outage journal,
job queue) and `journal` (the outage journal's waiting and set-aside writes)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Annotated
from uuid import UUID

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..background import QueueStatus
from ..extraction.rules import RuleBasedExtractor
from ..manager import MemoryManager
from ..outage.journal import WriteJournal
from ..runtime.connector import DatabaseConnector
from ..settings import MemorySettings
from ..store.status import BackendStatus
from .common import DataDirOption, app, fail, load_settings, out, run

__all__ = ["DEGRADED_EXIT_CODE", "journal_command", "status_command"]

DEGRADED_EXIT_CODE = 3
"""`status`'s exit code when memory is served degraded (3, as a monitoring check's "not OK" that is neither a
usage error, 2, nor a failure to run, 1)."""


async def _status(settings: MemorySettings) -> BackendStatus:
    # Only looks: no worker here, or the queued jobs would be run with this command's offline extractor.
    settings = settings.model_copy(update={"background_worker": False})
    async with MemoryManager.open(settings, extractor=RuleBasedExtractor()) as memory:
        return await memory.backend_status()


@app.command("status")
def status_command(data_dir: DataDirOption = None) -> None:
    """Which backend serves memory, whether the database answers, and the outage journal. Opening the
    memory replays what an earlier run journaled, if the database answers.

    Exit code, for health checks: 0 healthy; 3 degraded (serving from the cache and the journal: the database
    does not answer, or writes still wait in the journal); 1 the memory could not be opened at all."""
    status = run(_status(load_settings(data_dir)))
    table = Table(title="Memory backend", box=box.SIMPLE_HEAD)
    table.add_column("field")
    table.add_column("value")
    for field in dataclasses.fields(status):
        if field.name != "queue":
            value = str(getattr(status, field.name))
            if field.name == "set_aside_writes" and status.set_aside_writes:
                value += " (memory-plugin journal lists them; --readmit writes them, --discard drops them)"
            table.add_row(field.name, escape(value))
    _queue_rows(table, status.queue)
    out().print(table)
    if status.backend == "fallback" or not status.postgres_reachable:
        raise typer.Exit(DEGRADED_EXIT_CODE)


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
    table.add_row("queue deferred jobs", f"{queue.deferred} (users at their limit of waiting jobs; run when it drops)")
    table.add_row("queue failed attempts", str(queue.failed_attempts))
    table.add_row("queue dead jobs", f"{queue.dead}" + (" (memory-plugin worker --retry-dead)" if queue.dead else ""))


@app.command("journal")
def journal_command(
    readmit: Annotated[
        bool, typer.Option("--readmit", help="Move the set-aside writes back into the journal (all, or --write-id).")
    ] = False,
    discard: Annotated[
        bool, typer.Option("--discard", help="Delete the set-aside writes for good (all, or --write-id).")
    ] = False,
    write_ids: Annotated[
        list[str] | None, typer.Option("--write-id", help="Only this set-aside write (repeatable).")
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Show the outage journal (writes waiting for the database, and writes set aside for review: refused by
    the database even alone, journaled or extracted, or unsigned lines of an older journal); with --readmit,
    move reviewed writes back so they are replayed when a manager next reaches the database; with --discard,
    delete them."""
    settings = load_settings(data_dir)
    journal = WriteJournal.for_database(settings.data_dir, DatabaseConnector(settings).identity)
    wanted: set[UUID] | None = None
    if write_ids:
        try:
            wanted = {UUID(value) for value in write_ids}
        except ValueError:
            raise fail("--write-id takes the write id (a UUID) printed by `memory-plugin journal`") from None
    console = out()
    if readmit and discard:
        raise fail("--readmit and --discard exclude each other: pick what to do with the set-aside writes")
    if discard:
        gone = journal.discard(wanted)
        console.print(f"discarded {len(gone)} set-aside write(s); they will never be written")
        return
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
    unreadable = journal.set_aside_count() - len(rejected)
    if unreadable:
        console.print(f"{unreadable} set-aside line(s) are not journal entries (kept in {journal.rejected_path})")
