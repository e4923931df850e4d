"""The user export format, version 1: which table each section holds, and the checks a document passes before
anything is written. Pure (no I/O).

    {"format": "memory-plugin.user-export", "version": 1, "user_id": "…",
     "sections": {"memories": [row, …], "slots": [...], …}}

A row is the table's row as Postgres's `to_jsonb` gives it, without `user_id` (the document's) and without
generated columns. The document is a function of what is stored: exporting twice gives the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ..errors import ExportFormatError, ExportVersionError

__all__ = [
    "DERIVED_TABLES",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "SECTIONS",
    "TRANSIENT_TABLES",
    "ExportDocument",
    "parse_document",
]

EXPORT_FORMAT = "memory-plugin.user-export"
EXPORT_VERSION = 1

SECTIONS: dict[str, str] = {
    "memories": "public.user_memory",
    "slots": "public.memory_slots",
    "summaries": "public.memory_summaries",
    "chats": "public.chats",
    "chat_append_keys": "memory_private.chat_append_keys",
    "conversations": "public.conversations",
    "conversation_entries": "public.conversation_entries",
    "checkpoints": "memory_private.workflow_checkpoints",
    "sessions": "memory_private.memory_sessions",
    "jobs": "public.memory_jobs",
    "applied_writes": "memory_private.memory_applied_writes",
    "limits": "memory_private.memory_limits",
    "consent": "memory_private.memory_consent",
    "receipts": "memory_private.memory_receipts",
}
"""Section name -> the table it holds, in the order they are written and restored. A file written before a
section existed (`receipts`) reads it as empty."""

DERIVED_TABLES = frozenset(
    {
        "public.memory_search_docs",
        "memory_private.memory_search_terms",
        "memory_private.memory_search_counts",
        "memory_private.memory_usage",
        "memory_private.memory_write_buckets",
    }
)
"""Per-user tables left out, rebuilt when the sections are restored: the search index of the facts (in one pass at
the end of the import, `memory_search_index_facts`; the vectors by the embedding model: `MemoryManager.import_user`
or `memory-plugin reembed`), the row counts the database's bounds compare with the limits, and the write-rate
bucket (their triggers)."""

TRANSIENT_TABLES = frozenset({"memory_private.memory_turn_keys"})
"""Per-user tables left out and not rebuilt: operational data that lives hours, not user data (the idempotency keys
of memory turn finishes, kept 24 hours, whose answers name facts the `memories` section holds)."""

ORDER_BY: dict[str, tuple[str, ...]] = {"memories": ("created_at", "id"), "chats": ("created_at", "id")}
"""Row order of a section when not its primary key: restoring facts in the order they were learned gives their
search index the same session neighbours."""


@dataclass(frozen=True, slots=True)
class ExportDocument:
    """A parsed export: whose it is and its rows by section (every section present, maybe empty)."""

    user_id: UUID
    sections: dict[str, list[dict[str, Any]]]


def parse_document(raw: str | bytes | Mapping[str, Any]) -> ExportDocument:
    """Check an export's shape and version; raise `ExportFormatError` (`ExportVersionError` for another format
    version) saying what is wrong. Column names and values are checked against the tables when importing."""
    if isinstance(raw, str | bytes):
        try:
            data: Any = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ExportFormatError(f"the export is not valid JSON: {exc}") from None
    else:
        data = raw
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
        raise ExportFormatError(f"not a memory export: the top-level object must have format {EXPORT_FORMAT!r}")
    version = data.get("version")
    if version != EXPORT_VERSION:
        raise ExportVersionError(
            f"export format version {version!r} cannot be read by this release, which reads version {EXPORT_VERSION}"
        )
    try:
        user_id = UUID(str(data.get("user_id")))
    except ValueError:
        raise ExportFormatError(f"user_id must be a UUID, got {data.get('user_id')!r}") from None
    sections = data.get("sections")
    if not isinstance(sections, Mapping):
        raise ExportFormatError("sections must be an object of section name -> list of rows")
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ExportFormatError(f"unknown sections {unknown}; version {EXPORT_VERSION} has {sorted(SECTIONS)}")
    parsed: dict[str, list[dict[str, Any]]] = {}
    for name in SECTIONS:
        rows = sections.get(name, [])
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise ExportFormatError(f"section {name!r} must be a list of objects")
        if any("user_id" in row for row in rows):
            raise ExportFormatError(f"rows of section {name!r} must not name a user_id: the document's is used")
        parsed[name] = rows
    extra = sorted(set(data) - {"format", "version", "user_id", "sections"})
    if extra:
        raise ExportFormatError(f"unknown top-level fields {extra}")
    return ExportDocument(user_id=user_id, sections=parsed)
