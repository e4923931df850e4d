"""`rotate-key`: re-seal the sealed (encrypted) memory rows of every user under the active key."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer

from ..database.rekey import RotationReport, rotate_keys
from ..settings import MemorySettings
from .common import DataDirOption, app, fail, load_settings, out, run
from .database import admin_url

__all__ = ["rotate_key"]


async def _rotate(url: str, settings: MemorySettings, seal_plain: bool, batch_size: int) -> RotationReport:
    ring = settings.key_ring()
    assert ring is not None  # checked by the command
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await rotate_keys(
            conn, ring, settings.sensitive_categories, seal_plain=seal_plain, batch_size=batch_size
        )


@app.command("rotate-key")
def rotate_key(
    data_dir: DataDirOption = None,
    seal_plain: Annotated[
        bool, typer.Option(help="Also seal plain facts of MEMORY_SENSITIVE_CATEGORIES stored before keys were set.")
    ] = True,
    batch_size: Annotated[int, typer.Option(min=1, max=10_000, help="Rows re-sealed per statement.")] = 500,
) -> None:
    """Re-seal every user's encrypted memory rows under MEMORY_ENCRYPTION_ACTIVE_KEY (and seal the plain facts of
    the sensitive categories), as the administrative role. Batched, resumable and idempotent: safe from cron while
    applications run. Once it reports nothing left under an old key, that key can be removed from
    MEMORY_ENCRYPTION_KEYS."""
    settings = load_settings(data_dir)
    if settings.key_ring() is None:
        raise fail("no encryption keys: set MEMORY_ENCRYPTION_KEYS and MEMORY_ENCRYPTION_HASH_KEY (docs/privacy.md)")
    report = run(_rotate(admin_url(settings), settings, seal_plain, batch_size))
    out().print(report.describe())
    if report.unreadable:
        raise fail(f"{report.unreadable} row(s) are sealed under keys not configured: add them and run again")
