"""What `memory-plugin export` and `memory-plugin import` do, on the service path; the CLI registers them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from uuid import UUID

from ..errors import ExportFormatError
from .service import export_from_url, import_into_url
from .writer import ImportReport

__all__ = ["export_to", "import_from", "read_export_file"]


async def export_to(admin_url: str, user_id: UUID, output: Path | None) -> int:
    """Write the user's export to `output` (replaced only once complete) or to stdout; returns characters."""
    written = 0
    if output is None:
        async for chunk in export_from_url(admin_url, user_id, as_user=False):
            sys.stdout.write(chunk)
            written += len(chunk)
        sys.stdout.flush()
        return written
    partial = output.with_name(output.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as out:
            async for chunk in export_from_url(admin_url, user_id, as_user=False):
                out.write(chunk)
                written += len(chunk)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return written


def read_export_file(path: Path) -> bytes:
    """The bytes of an export file (`-`: stdin)."""
    try:
        return sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        raise ExportFormatError(f"cannot read {path}: {exc.strerror or exc}") from None


async def import_from(admin_url: str, raw: bytes) -> ImportReport:
    """Restore an export: all of it, or nothing."""
    return await import_into_url(admin_url, raw)
