"""A durable local journal of long-term writes made while Postgres is unreachable.

One JSON line per write, appended and fsynced before the write is acknowledged, so a crash right after
cannot lose it. Entries are replayed in order when the database returns; each carries a `write_id` that
`public.memory_upsert_items` records, so replaying an entry twice (a crash after the database committed
but before the journal was cleared) applies it once.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from .records import MemoryItem

__all__ = ["JournalEntry", "WriteJournal"]


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One pending write."""

    write_id: UUID
    """Idempotency key: the database applies a given write once."""
    user_id: UUID
    items: tuple[MemoryItem, ...]
    reinforcement_step: float

    def to_json(self) -> str:
        """One journal line."""
        return json.dumps(
            {
                "write_id": str(self.write_id),
                "user_id": str(self.user_id),
                "reinforcement_step": self.reinforcement_step,
                "items": [item.as_json() for item in self.items],
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, line: str) -> JournalEntry:
        """Parse one journal line."""
        raw = json.loads(line)
        return cls(
            write_id=UUID(raw["write_id"]),
            user_id=UUID(raw["user_id"]),
            reinforcement_step=float(raw["reinforcement_step"]),
            items=tuple(_item_from_json(i) for i in raw["items"]),
        )


def _item_from_json(raw: dict[str, Any]) -> MemoryItem:
    occurred = raw.get("occurred_at")
    return MemoryItem(
        kind=raw["kind"],
        category=raw["category"],
        content=raw["content"],
        content_hash=raw["content_hash"],
        confidence=float(raw["confidence"]),
        source=raw["source"],
        importance=int(raw["importance"]),
        source_message_ids=tuple(raw.get("source_message_ids") or ()),
        session_id=raw.get("session_id"),
        attributes=dict(raw.get("attributes") or {}),
        occurred_at=datetime.fromisoformat(occurred) if occurred else None,
    )


class WriteJournal:
    """An append-only, fsynced JSONL file of pending writes.

    Appends come from the event loop thread but may be called from worker threads too, so a lock
    serialises them. A torn last line (the process died mid-write) is skipped on read: it was never
    acknowledged to the caller.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, user_id: UUID, items: Sequence[MemoryItem], reinforcement_step: float) -> JournalEntry:
        """Durably record a write; returns the entry (with its new `write_id`)."""
        entry = JournalEntry(
            write_id=uuid4(), user_id=user_id, items=tuple(items), reinforcement_step=reinforcement_step
        )
        line = entry.to_json() + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
        return entry

    def entries(self) -> list[JournalEntry]:
        """Pending entries, oldest first."""
        with self._lock:
            if not self.path.exists():
                return []
            text = self.path.read_text(encoding="utf-8")
        out = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                out.append(JournalEntry.from_json(line))
            except (ValueError, KeyError):
                continue  # a torn final line: never acknowledged, so nothing was promised
        return out

    def __len__(self) -> int:
        return len(self.entries())

    def remove(self, done: Sequence[UUID]) -> None:
        """Drop replayed entries, keeping any appended meanwhile; atomic (write a temp file, rename)."""
        done_ids = set(done)
        with self._lock:
            if not self.path.exists():
                return
            keep = [
                line
                for line in self.path.read_text(encoding="utf-8").splitlines()
                if line.strip() and not _has_write_id(line, done_ids)
            ]
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, "".join(line + "\n" for line in keep).encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # make the rename itself durable
            finally:
                os.close(dir_fd)


def _has_write_id(line: str, ids: set[UUID]) -> bool:
    try:
        return UUID(json.loads(line)["write_id"]) in ids
    except (ValueError, KeyError):
        return False
