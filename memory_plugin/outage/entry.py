"""What the outage journal holds: `JournalEntry` (one pending write, as one JSON line) and where the journal
of a database lives (`database_identity`, `journal_path`)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from uuid import UUID

from ..database.urls import database_identity
from ..quality.rules import WriteRules
from ..rows import MemoryItem

__all__ = ["CancelledWrites", "JournalEntry", "database_identity", "journal_path", "parse_entry", "rejection_reason"]


def journal_path(data_dir: Path, identity: str) -> Path:
    """The journal file of the database `identity` under `data_dir` (see `database_identity`)."""
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:24]
    return data_dir / "journal" / f"writes-{digest}.jsonl"


_DEFAULT = WriteRules()


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One pending write."""

    write_id: UUID
    """Idempotency key: the database applies a given write once."""
    user_id: UUID
    items: tuple[MemoryItem, ...]
    rules: WriteRules = _DEFAULT
    """The rules the write was acknowledged under; a line without a threshold gets the default."""
    split_from: UUID | None = None
    """The acknowledged write this entry is a part of (`halves`), None for a whole write."""

    def to_json(self) -> str:
        """One journal line."""
        fields: dict[str, object] = {
            "write_id": str(self.write_id),
            "user_id": str(self.user_id),
            "reinforcement_step": self.rules.reinforcement_step,
            "near_duplicate_threshold": self.rules.near_duplicate_threshold,
            "embedding_threshold": self.rules.embedding_threshold,
            "items": [item.as_json() for item in self.items],
        }
        if self.split_from is not None:
            fields["split_from"] = str(self.split_from)
        return json.dumps(fields, ensure_ascii=False)

    def record_id(self, item: MemoryItem) -> UUID:
        """The id of the provisional record the write returned for `item` (the caller may forget it by it);
        a part keeps the ids of the write it was split from."""
        return uuid.uuid5(self.split_from or self.write_id, item.content_hash)

    def halves(self) -> tuple[JournalEntry, JournalEntry]:
        """Two parts of this entry (two or more items), each with its own write id (derived from this one, so
        the database applies each once) and the provisional record ids of the whole."""
        middle, root = len(self.items) // 2, self.split_from or self.write_id

        def part(n: int, items: tuple[MemoryItem, ...]) -> JournalEntry:
            return replace(self, write_id=uuid.uuid5(self.write_id, f"part {n} of 2"), items=items, split_from=root)

        return part(1, self.items[:middle]), part(2, self.items[middle:])

    @classmethod
    def from_json(cls, line: str) -> JournalEntry:
        """Parse one entry's JSON (a journal line's fields; `mac` and `error` are ignored). Raises ValueError,
        TypeError, KeyError or AttributeError on input of the wrong shape, RecursionError when nested too deep."""
        raw = json.loads(line)
        if not isinstance(raw, dict) or not isinstance(raw.get("items"), list):
            raise ValueError("a journal entry is a JSON object with a list of items")
        return cls(
            write_id=UUID(raw["write_id"]),
            user_id=UUID(raw["user_id"]),
            rules=WriteRules(
                reinforcement_step=float(raw["reinforcement_step"]),
                near_duplicate_threshold=float(raw.get("near_duplicate_threshold", _DEFAULT.near_duplicate_threshold)),
                embedding_threshold=float(raw.get("embedding_threshold", _DEFAULT.embedding_threshold)),
            ),
            items=tuple(MemoryItem.from_json(i) for i in raw["items"]),
            split_from=UUID(raw["split_from"]) if raw.get("split_from") else None,
        )


@dataclass(frozen=True, slots=True)
class CancelledWrites:
    """What `cancel_pending` or `drop_user` removed from the journal."""

    items: int
    """Pending items removed."""
    dropped: tuple[UUID, ...]
    """Writes left without items, removed whole (untrack them: they will never be replayed)."""


def rejection_reason(payload: bytes) -> str:
    """The `error` a rejected line was set aside with ("" when it has none, e.g. an unsigned old line)."""
    try:
        error = json.loads(payload.decode("utf-8")).get("error", "")
    except (ValueError, AttributeError, RecursionError):
        return ""
    return error if isinstance(error, str) else ""


def parse_entry(payload: bytes) -> JournalEntry | None:
    """The entry in a line's JSON (signature not checked: `WriteJournal` does), or None for any other line."""
    try:
        return JournalEntry.from_json(payload.decode("utf-8"))
    # A line of any shape: UnicodeDecodeError, JSONDecodeError and pydantic's ValidationError are ValueErrors;
    # a list where an object belongs gives TypeError or AttributeError; 100,000 nested "[" a RecursionError.
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
