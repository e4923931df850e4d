"""`ControlFacade`: the facade's inspection and user control: list, forget, export, import, pause, status."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..background import QueueStatus
from ..conversions import refuse_sealed
from ..database.urls import masked_url
from ..embeddings.reembed import reembed_user
from ..errors import InvalidMemoryInputError, MemoryPluginError
from ..export import ImportReport, export_from_url, import_into_url
from ..logs import LOG_PREFIX, logger
from ..rows import MemoryRecord
from ..stats import MemoryStats
from ..store.status import BackendStatus
from ..validation import (
    MAX_ENTITY_CHARS,
    check_text,
    parse_item_id,
    parse_user_id,
)

if TYPE_CHECKING:
    pass

from .long_term import LongTermFacade

__all__ = ["ControlFacade"]


class ControlFacade(LongTermFacade):
    """Inspection and user-control operations of `MemoryManager`."""

    # --- inspection and user control ----------------------------------------------------------------------------
    async def list_memory(self, user_id: str | UUID, *, limit: int = 1000) -> list[MemoryRecord]:
        """Every stored item of the user, newest first (for `memory-plugin inspect` and exports)."""
        self._check_open()
        return refuse_sealed(await self.store.list_records(parse_user_id(user_id), limit=limit))

    async def search_text(self, user_id: str | UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """Stored items whose content contains `text` (case-insensitive)."""
        self._check_open()
        if not text.strip():
            raise InvalidMemoryInputError("search text must not be empty")
        check_text(text, "search text", MAX_ENTITY_CHARS)
        return refuse_sealed(await self.store.search_text(parse_user_id(user_id), text, limit=limit))

    async def forget(self, user_id: str | UUID, item_id: str | UUID) -> bool:
        """Delete one stored item of the user; returns whether it existed. Background jobs of the user queued
        before (not yet written) will not write it again: they leave out facts matching it."""
        self._check_open()
        uid, record_id = parse_user_id(user_id), parse_item_id(item_id)
        queue, _ = self._background()
        pending = await queue.status()
        if pending.depth or pending.dead:
            # Marked before the delete: a job writing now either sees the mark, or finishes first and its
            # write is deleted with the rest (the queue holds the job's row while it writes). A sealed fact's text
            # is not marked: the mark is stored in the jobs' payload, in the clear.
            records = await self.store.list_records(uid, limit=100_000)
            forgotten = [r.content for r in records if r.id == record_id and not r.sensitive]
            if forgotten:
                await queue.forget(uid, forgotten)
        return await self.store.delete(uid, record_id)

    def export_user(self, user_id: str | UUID) -> AsyncIterator[str]:
        """Everything stored about the user, as the text chunks of one versioned JSON document (docs/export.md):
        `async for chunk in memory.export_user(user_id): out.write(chunk)`. Read as the user under row-level
        security, in pages of one consistent snapshot, so memory stays bounded whatever the user holds."""
        self._check_open()
        uid = parse_user_id(user_id)
        url = self._postgres_url("an export")
        return export_from_url(url, uid, as_user=True, connect_timeout=self.settings.connect_timeout_seconds)

    async def import_user(self, document: str | bytes | Mapping[str, Any]) -> ImportReport:
        """Restore an export into this database, which must hold nothing of that user (`ImportConflictError`
        otherwise; `ExportFormatError` for a file that is not a readable export): all of it, or nothing. Runs on
        the service path (`admin_database_url`, else the manager's own URL), then gives the restored facts
        vectors of this manager's embedding model (vectors are not part of an export)."""
        self._check_open()
        admin = self.settings.admin_database_url
        url = admin.get_secret_value() if admin is not None else self._postgres_url("an import")
        report = await import_into_url(url, document, connect_timeout=self.settings.connect_timeout_seconds)
        if self.embedder is not None and report.rows.get("memories"):
            await reembed_user(self.store, self.embedder, report.user_id)
        return report

    async def pause_memory(self, user_id: str | UUID, paused: bool = True) -> None:
        """Pause (or, with `paused=False`, resume) the user's memory: while paused nothing new is stored about
        them — `update_memory` and `remember` raise `MemoryPausedError`, extraction (inline, queued, or already
        queued) stores nothing — and reads work as before. Kept in the database: every process sees it."""
        self._check_open()
        await self._consent.set_paused(parse_user_id(user_id), paused)

    async def memory_paused(self, user_id: str | UUID) -> bool:
        """Whether the user's memory is paused (`pause_memory`)."""
        self._check_open()
        return await self._consent.paused(parse_user_id(user_id))

    async def backend_status(self) -> BackendStatus:
        """Which backend serves long-term memory, whether the database answers (pinged now), the journal's
        length, the last connection error and the fallback/replay counters."""
        self._check_open()
        status = await self.store.status(require_primary=self.settings.require_pg_memory)
        try:
            queue: QueueStatus | None = await self.queue_status()
        except MemoryPluginError as exc:
            logger.warning("%s could not read the memory job queue: %s", LOG_PREFIX, exc)
            queue = None
        return dataclasses.replace(status, queue=queue)

    async def describe(self) -> dict[str, Any]:
        """Backend, extractor, live sessions and counters, for logs and status pages (the database URL without its
        password). Postgres sessions are counted by one query awaited on the manager's pool, Redis's in a worker
        thread, the RAM store's inline."""
        stats = self.stats
        return {
            "backend": self.store.backend_name,
            "database_url": masked_url(self.database_url) if self.database_url else None,
            "extractor": self.extractor.name,
            "live_sessions": await self._session_calls.live(),
            "stats": {name: getattr(stats, name) for name in MemoryStats.__slots__},
        }
