"""A durable local journal of long-term writes made while Postgres is unreachable.

One JSON line per write, appended and fsynced before the write is acknowledged, so a crash right after
cannot lose it. Entries are replayed in order when the database returns; each carries a `write_id` that
`public.memory_upsert_items` records, so replaying an entry twice (a crash after the database committed
but before the journal was cleared) applies it once.

One journal file per database (`journal_path`: the file name holds a hash of the database's identity), so
entries written for one database are never replayed into another. Several processes may share a file:
appends and rewrites take an exclusive `flock` on a sidecar lock file.

Every line is signed: HMAC-SHA256 over the journal file's name and the entry's JSON, with a 32-byte key
kept beside the journals (`journal.key`, mode 0600, created on first use), appended as the line's last
field, `"mac"`. A line that is not an entry of this installation (unsigned, signed with another key, moved
from another database's journal, truncated, or not an entry at all: wrong shape, nesting too deep to parse)
is never replayed: it moves to the rejected file with a warning, and start-up goes on. An entry forged with
another user's id is therefore refused unless the forger can read the key.

A forget or an erase wins over older pending writes: `cancel_pending` removes a memory's pending items,
`drop_user` every pending write of a user (and their lines in the rejected file).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from uuid import UUID, uuid4

from psycopg.conninfo import conninfo_to_dict

from ..logs import LOG_PREFIX, logger
from ..quality.rules import WriteRules
from ..rows import MemoryItem

try:  # POSIX; elsewhere only the in-process lock protects the file
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["CancelledWrites", "JournalEntry", "WriteJournal", "database_identity", "journal_path"]


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


_KEY_BYTES = 32
_MAC_FIELD = b',"mac":"'
_MAC_HEX = 64  # SHA-256


class WriteJournal:
    """An append-only, fsynced JSONL file of pending writes, each line signed (see the module docstring).

    Appends run in worker threads (`asyncio.to_thread`: fsync blocks), so a thread lock serialises them
    within a process and `flock` on a sidecar file across processes. A crash mid-append leaves a torn last
    line without its newline. It was never acknowledged to the caller, so it is dropped: skipped on read,
    and cut off before the next append (otherwise the next entry would fuse with it into one unreadable
    line and be lost although acknowledged).
    """

    def __init__(self, path: Path, *, key_path: Path | None = None) -> None:
        self.path = path
        self.key_path = key_path or path.parent / "journal.key"
        """The signing key (32 random bytes, mode 0600), shared by the journals of one data directory."""
        self._lock = threading.Lock()  # the directory is created on first use: no side effect until needed
        self._key: bytes | None = None

    @classmethod
    def for_database(cls, data_dir: Path, identity: str) -> WriteJournal:
        """The journal of the database `identity` under `data_dir` (see `journal_path`)."""
        return cls(journal_path(data_dir, identity))

    @property
    def rejected_path(self) -> Path:
        """Entries the database refused for good, and lines that are not entries of this journal, kept for an
        operator (same line format plus `error`; rename the file to the journal's name to replay its signed
        entries: the others are refused again)."""
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
            _append_durably(self.path, self._sign(entry.to_json()))
        return entry

    def reject(self, entry: JournalEntry, error: str) -> None:
        """Keep an entry the database refused for good in `rejected_path` (remove it from the journal after)."""
        line = json.dumps({**json.loads(entry.to_json()), "error": error}, ensure_ascii=False)
        with self._locked():
            _append_durably(self.rejected_path, self._sign(line))

    def entries(self) -> list[JournalEntry]:
        """Pending entries, oldest first. Lines that are not signed entries of this journal move to
        `rejected_path` (each with a warning); they never stop the caller."""
        if not self.path.exists():
            return []  # nothing was ever journaled (and no directory or lock file is created for asking)
        with self._locked():
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return []
            complete, _torn = _split_lines(data)
            out: list[JournalEntry] = []
            for raw in complete:
                entry = self._parse(raw) if raw.strip() else None
                if entry is None and raw.strip():
                    return self._rewrite(lambda entry: entry)  # set the bad lines aside, once
                if entry is not None:
                    out.append(entry)
            return out

    def __len__(self) -> int:
        return len(self.entries())

    def split(self, entry: JournalEntry, parts: Sequence[JournalEntry]) -> None:
        """Replace `entry` by `parts` where it stands (atomic): a write too big for one statement is replayed
        part by part, and a crash between parts replays only the parts left."""
        if self.path.exists():
            with self._locked():
                self._rewrite(lambda kept: tuple(parts) if kept.write_id == entry.write_id else kept)

    def remove(self, done: Sequence[UUID]) -> None:
        """Drop replayed entries, keeping any appended meanwhile; atomic (write a temp file, rename).

        A torn last line is dropped too (under the lock no append is in progress, so it is a crash's
        leftover), and a complete but unreadable line moves to `rejected_path` rather than staying forever.
        """
        done_ids = set(done)
        if self.path.exists():
            with self._locked():
                self._rewrite(lambda entry: None if entry.write_id in done_ids else entry)

    def cancel_pending(
        self, user_id: UUID, *, memory_ids: Collection[UUID] = (), content_hashes: Collection[str] = ()
    ) -> CancelledWrites:
        """Remove the user's pending items of a memory that was forgotten, so no replay brings it back:
        items whose `content_hash` is in `content_hashes` (the stored memory's, for any restatement of it),
        or whose provisional record id (`JournalEntry.record_id`) is in `memory_ids` (a memory forgotten
        before it reached the database). The write's other items stay; a write left empty is removed.
        Only writes already in the journal are affected: a later restatement is a new write."""
        ids, hashes = set(memory_ids), set(content_hashes)
        if not (ids or hashes):
            return CancelledWrites(0, ())
        with self._locked():
            return self._remove_items(
                user_id, lambda entry, item: item.content_hash in hashes or entry.record_id(item) in ids
            )

    def drop_user(self, user_id: UUID) -> CancelledWrites:
        """Remove every pending write of the user (an erase), and the user's lines in `rejected_path` (signed
        entries of the user, and unreadable lines that hold the user's id)."""
        with self._locked():
            cancelled = self._remove_items(user_id, lambda _entry, _item: True)
            if self.rejected_path.exists():
                self._purge_rejected(user_id)
        return cancelled

    def _remove_items(self, user_id: UUID, removes: Callable[[JournalEntry, MemoryItem], bool]) -> CancelledWrites:
        """Remove the user's pending items for which `removes` is true; a write left empty goes whole. Holds
        the lock (the caller takes it)."""
        removed = 0
        dropped: list[UUID] = []

        def keep(entry: JournalEntry) -> JournalEntry | None:
            nonlocal removed
            if entry.user_id != user_id:
                return entry
            kept = tuple(i for i in entry.items if not removes(entry, i))
            if len(kept) == len(entry.items):
                return entry
            removed += len(entry.items) - len(kept)
            if not kept:
                dropped.append(entry.write_id)
                return None
            return replace(entry, items=kept)

        if self.path.exists():
            self._rewrite(keep)
        return CancelledWrites(removed, tuple(dropped))

    def rejected(self) -> list[tuple[JournalEntry, str]]:
        """The readable entries in `rejected_path` with the reason each was set aside (what an operator
        reviews before `readmit`); lines that are not entries are left out."""
        if not self.rejected_path.exists():
            return []
        with self._locked():
            complete, _torn = _split_lines(self.rejected_path.read_bytes())
        out: list[tuple[JournalEntry, str]] = []
        for raw in complete:
            entry = _parse(raw) if raw.strip() else None
            if entry is not None:
                out.append((entry, _reason(raw)))
        return out

    def readmit(self, write_ids: Collection[UUID] | None = None) -> list[JournalEntry]:
        """Move entries an operator reviewed from `rejected_path` back into the journal, signed with this
        installation's key, so they are replayed: those with the given write ids, or every readable entry
        when None (e.g. the unsigned entries of a journal written before lines were signed). They go after
        the pending entries. Lines that are not entries stay in the rejected file. Returns the entries."""
        with self._locked():
            if not self.rejected_path.exists():
                return []
            complete, _torn = _split_lines(self.rejected_path.read_bytes())
            back: list[JournalEntry] = []
            stay: list[bytes] = []
            for raw in complete:
                entry = _parse(raw) if raw.strip() else None  # `mac` and `error` are ignored
                if entry is not None and (write_ids is None or entry.write_id in write_ids):
                    back.append(entry)
                elif raw.strip():
                    stay.append(raw)
            for entry in back:
                _append_durably(self.path, self._sign(entry.to_json()))
            _replace_durably(self.rejected_path, stay)
        return back

    # --- signing and rewriting (the caller holds the lock) ------------------------------------------------
    def _signing_key(self) -> bytes:
        if self._key is None:
            self._key = _load_or_create_key(self.key_path)
        return self._key

    def _mac(self, payload: bytes) -> bytes:
        # The journal's name is signed too: a line moved into another database's journal is refused.
        message = self.path.name.encode("utf-8") + b"\n" + payload
        return hmac.new(self._signing_key(), message, hashlib.sha256).hexdigest().encode("ascii")

    def _sign(self, payload: str) -> str:
        """The signed line of an entry's JSON object: the same object with `mac` as its last field."""
        mac = self._mac(payload.encode("utf-8")).decode("ascii")
        return f'{payload[:-1]},"mac":"{mac}"}}'

    def _verified(self, raw: bytes) -> bytes | None:
        """The signed JSON of a line (without `mac`), or None when the line is not signed with this key."""
        head, field, tail = raw.rstrip(b"\r").rpartition(_MAC_FIELD)
        if not field or len(tail) != _MAC_HEX + 2 or not tail.endswith(b'"}'):
            return None
        payload = head + b"}"
        return payload if hmac.compare_digest(self._mac(payload), tail[:_MAC_HEX]) else None

    def _parse(self, raw: bytes) -> JournalEntry | None:
        payload = self._verified(raw)
        return None if payload is None else _parse(payload)

    def _rewrite(
        self, transform: Callable[[JournalEntry], JournalEntry | tuple[JournalEntry, ...] | None]
    ) -> list[JournalEntry]:
        """Rewrite the journal atomically (temp file, rename) with each entry as `transform` returns it (the
        same entry: its line kept as is; another, or several: signed anew; None: removed). Lines that are not
        entries of this journal move to `rejected_path` with a warning; a torn last line is dropped. Returns
        the entries kept."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        complete, _torn = _split_lines(data)
        lines: list[bytes] = []
        kept: list[JournalEntry] = []
        for number, raw in enumerate(complete, start=1):
            if not raw.strip():
                continue
            entry = self._parse(raw)
            if entry is None:
                self._set_aside(raw, number)
                continue
            new = transform(entry)
            if new is entry:
                kept.append(entry)
                lines.append(raw)
                continue
            for part in () if new is None else new if isinstance(new, tuple) else (new,):
                kept.append(part)
                lines.append(self._sign(part.to_json()).encode("utf-8"))
        _replace_durably(self.path, lines)
        return kept

    def _set_aside(self, raw: bytes, number: int) -> None:
        if self._verified(raw) is not None:
            why = "is not a journal entry"
        elif _parse(raw) is not None:
            why = (
                "is an entry not signed with this installation's journal key (if it is genuine, e.g. written"
                " before lines were signed, review it and run `memory-plugin journal --readmit`)"
            )
        else:
            why = "is neither a journal entry nor signed"
        logger.warning(
            "%s line %d of journal %s %s (%d bytes): not replayed, moved to %s",
            LOG_PREFIX,
            number,
            self.path,
            why,
            len(raw),
            self.rejected_path,
        )
        _append_durably(self.rejected_path, raw.decode("utf-8", errors="replace"))

    def _purge_rejected(self, user_id: UUID) -> None:
        complete, _torn = _split_lines(self.rejected_path.read_bytes())
        mark = str(user_id).encode("ascii")
        kept = []
        for raw in complete:
            entry = self._parse(raw)
            mine = entry.user_id == user_id if entry is not None else mark in raw.lower()
            if raw.strip() and not mine:
                kept.append(raw)
        _replace_durably(self.rejected_path, kept)


def _load_or_create_key(path: Path) -> bytes:
    """The journal key at `path`, created (32 random bytes, 0600, durably, atomically) when missing. A key of
    the wrong size is set aside (renamed) and replaced: entries signed with it are then refused, not lost."""
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = b""
    else:
        if len(key) == _KEY_BYTES:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
                logger.warning("%s journal key %s was readable by others: mode set to 0600", LOG_PREFIX, path)
            return key
        aside = path.with_name(f"{path.name}.invalid-{int(time.time())}")
        os.replace(path, aside)
        logger.warning(
            "%s journal key %s has %d bytes, not %d: moved to %s", LOG_PREFIX, path, len(key), _KEY_BYTES, aside
        )
    key = secrets.token_bytes(_KEY_BYTES)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a `key_path` outside the journal directory
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a key another process created meanwhile
    except FileExistsError:
        key = path.read_bytes()
    finally:
        os.unlink(tmp)
    _fsync_dir(path.parent)
    return key


def _split_lines(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines, and what follows the last newline (a torn line, or b"")."""
    *complete, torn = data.split(b"\n")
    return complete, torn


def _reason(payload: bytes) -> str:
    """The `error` a rejected line was set aside with ("" when it has none, e.g. an unsigned old line)."""
    try:
        error = json.loads(payload.decode("utf-8")).get("error", "")
    except (ValueError, AttributeError, RecursionError):
        return ""
    return error if isinstance(error, str) else ""


def _parse(payload: bytes) -> JournalEntry | None:
    try:
        return JournalEntry.from_json(payload.decode("utf-8"))
    # A line of any shape: UnicodeDecodeError, JSONDecodeError and pydantic's ValidationError are ValueErrors;
    # a list where an object belongs gives TypeError or AttributeError; 100,000 nested "[" a RecursionError.
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _replace_durably(path: Path, lines: Sequence[bytes]) -> None:
    """Replace `path` with `lines` atomically and durably (temp file, fsync, rename, fsync the directory)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, b"".join(line + b"\n" for line in lines))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)  # make the rename itself durable


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
    logger.warning("%s dropped a torn last line (%d bytes, never acknowledged) from %s", LOG_PREFIX, size - keep, path)
