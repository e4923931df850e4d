"""A durable local journal of long-term writes made while Postgres is unreachable.

One JSON line per write, appended and fsynced before the write is acknowledged, so a crash right after
cannot lose it. Entries are replayed in order when the database returns; each carries a `write_id` that
`public.memory_upsert_items` records, so replaying an entry twice (a crash after the database committed
but before the journal was cleared) applies it once.

One journal file per database (`journal_path`: the file name holds a hash of the database's identity), so
entries written for one database are never replayed into another. Several processes may share a file:
appends and rewrites take an exclusive `flock` on a sidecar lock file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID, uuid4

from psycopg.conninfo import conninfo_to_dict

from ..quality.rules import WriteRules
from ..rows import MemoryItem

try:  # POSIX; elsewhere only the in-process lock protects the file
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["JournalEntry", "WriteJournal", "database_identity", "journal_path"]

logger = logging.getLogger("memory_plugin")


def database_identity(url: str) -> str:
    """What identifies a Postgres database for the journal: host (or socket directory), port and database
    name from a connection URL or conninfo string; the user and password are left out (the same database
    reached as another role is the same database)."""
    params = conninfo_to_dict(url)
    host = str(params.get("host") or params.get("hostaddr") or "")
    port = str(params.get("port") or "5432")
    dbname = str(params.get("dbname") or params.get("user") or "")
    return f"postgresql://{host}:{port}/{dbname}"


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

    def to_json(self) -> str:
        """One journal line."""
        return json.dumps(
            {
                "write_id": str(self.write_id),
                "user_id": str(self.user_id),
                "reinforcement_step": self.rules.reinforcement_step,
                "near_duplicate_threshold": self.rules.near_duplicate_threshold,
                "embedding_threshold": self.rules.embedding_threshold,
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
            rules=WriteRules(
                reinforcement_step=float(raw["reinforcement_step"]),
                near_duplicate_threshold=float(raw.get("near_duplicate_threshold", _DEFAULT.near_duplicate_threshold)),
                embedding_threshold=float(raw.get("embedding_threshold", _DEFAULT.embedding_threshold)),
            ),
            items=tuple(MemoryItem.from_json(i) for i in raw["items"]),
        )


class WriteJournal:
    """An append-only, fsynced JSONL file of pending writes.

    Appends run in worker threads (`asyncio.to_thread`: fsync blocks), so a thread lock serialises them
    within a process and `flock` on a sidecar file across processes. A crash mid-append leaves a torn last
    line without its newline. It was never acknowledged to the caller, so it is dropped: skipped on read,
    and cut off before the next append (otherwise the next entry would fuse with it into one unreadable
    line and be lost although acknowledged).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # the directory is created on first use: no side effect until needed

    @classmethod
    def for_database(cls, data_dir: Path, identity: str) -> WriteJournal:
        """The journal of the database `identity` under `data_dir` (see `journal_path`)."""
        return cls(journal_path(data_dir, identity))

    @property
    def rejected_path(self) -> Path:
        """Entries the database refused for good, kept for an operator (same line format plus `error`; rename
        the file to the journal's name to replay them)."""
        return self.path.with_name(self.path.stem + ".rejected.jsonl")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if fcntl is None:  # pragma: no cover - Windows
                yield
                return
            fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def append(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        rules: WriteRules,
        *,
        write_id: UUID | None = None,
    ) -> JournalEntry:
        """Durably record a write (fsynced when this returns); returns the entry. Pass the `write_id` the
        write was already attempted with, so a replay cannot apply it a second time."""
        entry = JournalEntry(
            write_id=write_id or uuid4(),
            user_id=user_id,
            items=tuple(items),
            rules=rules,
        )
        with self._locked():
            _append_durably(self.path, entry.to_json())
        return entry

    def reject(self, entry: JournalEntry, error: str) -> None:
        """Keep an entry the database refused for good in `rejected_path` (remove it from the journal after)."""
        line = json.dumps({**json.loads(entry.to_json()), "error": error}, ensure_ascii=False)
        with self._locked():
            _append_durably(self.rejected_path, line)

    def entries(self) -> list[JournalEntry]:
        """Pending entries, oldest first."""
        if not self.path.exists():
            return []  # nothing was ever journaled (and no directory or lock file is created for asking)
        with self._locked():
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return []
        complete, _torn = _split_lines(data)
        out = []
        for number, raw in enumerate(complete, start=1):
            entry = _parse(raw)
            if entry is not None:
                out.append(entry)
            elif raw.strip():
                logger.warning("🧠 [Memory] unreadable line %d in journal %s skipped", number, self.path)
        return out

    def __len__(self) -> int:
        return len(self.entries())

    def remove(self, done: Sequence[UUID]) -> None:
        """Drop replayed entries, keeping any appended meanwhile; atomic (write a temp file, rename).

        A torn last line is dropped too (under the lock no append is in progress, so it is a crash's
        leftover), and a complete but unreadable line moves to `rejected_path` rather than staying forever.
        """
        done_ids = set(done)
        if not self.path.exists():
            return
        with self._locked():
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return
            complete, _torn = _split_lines(data)
            keep: list[bytes] = []
            for raw in complete:
                if not raw.strip():
                    continue
                entry = _parse(raw)
                if entry is None:
                    _append_durably(self.rejected_path, raw.decode("utf-8", errors="replace"))
                elif entry.write_id not in done_ids:
                    keep.append(raw)
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _write_all(fd, b"".join(line + b"\n" for line in keep))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.path.parent)  # make the rename itself durable


def _split_lines(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines, and what follows the last newline (a torn line, or b"")."""
    *complete, torn = data.split(b"\n")
    return complete, torn


def _parse(raw: bytes) -> JournalEntry | None:
    try:
        return JournalEntry.from_json(raw.decode("utf-8"))
    except (ValueError, KeyError, TypeError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _append_durably(path: Path, line: str) -> None:
    """Append one line and fsync it, first cutting off a torn last line left by a crash. Caller holds the lock."""
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        _cut_torn_tail(fd, path)
        _write_all(fd, (line + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)  # a new file's directory entry must be durable too


def _cut_torn_tail(fd: int, path: Path) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    keep, end = 0, size
    while end > 0:
        start = max(0, end - 65536)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    os.ftruncate(fd, keep)
    logger.warning("🧠 [Memory] dropped a torn last line (%d bytes, never acknowledged) from %s", size - keep, path)
