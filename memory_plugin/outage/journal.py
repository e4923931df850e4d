"""A durable local journal of long-term writes made while Postgres is unreachable (`WriteJournal`; its entries
are in `entry.py`, its crash-safe file primitives in `durable.py`).

One JSON line per write, appended and fsynced before the write is acknowledged, so a crash right after
cannot lose it. Entries are replayed in order when the database returns; each carries a `write_id` that
`public.memory_upsert_items` records, so replaying an entry twice (a crash after the database committed
but before the journal was cleared) applies it once.

One journal file per database (`journal_path`: the file name holds a hash of the database's identity), so
entries written for one database are never replayed into another. Several processes may share a file:
appends and rewrites take an exclusive `flock` on a sidecar lock file.

Every line is signed: HMAC-SHA256 over the journal file's name and the entry's JSON, with a 32-byte key
kept away from the journals (`MEMORY_JOURNAL_KEY`, else `journal.key` in `MEMORY_JOURNAL_KEY_DIR` or the
user's config directory, mode 0600, created on first use: `durable.default_key_path`; a key file an earlier
version kept beside the journals is moved there on first use), appended as the line's last
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
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from uuid import UUID, uuid4

from ..logs import LOG_PREFIX, logger
from ..quality.rules import WriteRules
from ..rows import MemoryItem
from .durable import (
    adopt_key,
    append_durably,
    default_key_path,
    key_from_environment,
    load_or_create_key,
    replace_durably,
    split_lines,
)
from .entry import CancelledWrites, JournalEntry, database_identity, journal_path, parse_entry, rejection_reason

try:  # POSIX; elsewhere only the in-process lock protects the file
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["CancelledWrites", "JournalEntry", "WriteJournal", "database_identity", "journal_path"]


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
        self._explicit_key_path = key_path is not None
        self.key_path = key_path or default_key_path()
        """The signing key's file (32 random bytes, mode 0600), outside the journal directory; not read when
        `MEMORY_JOURNAL_KEY` holds the key."""
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
            append_durably(self.path, self._sign(entry.to_json()))
        return entry

    def reject(self, entry: JournalEntry, error: str) -> None:
        """Keep an entry the database refused for good in `rejected_path` (remove it from the journal after)."""
        line = json.dumps({**json.loads(entry.to_json()), "error": error}, ensure_ascii=False)
        with self._locked():
            append_durably(self.rejected_path, self._sign(line))

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
            complete, _torn = split_lines(data)
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
            complete, _torn = split_lines(self.rejected_path.read_bytes())
        out: list[tuple[JournalEntry, str]] = []
        for raw in complete:
            entry = parse_entry(raw) if raw.strip() else None
            if entry is not None:
                out.append((entry, rejection_reason(raw)))
        return out

    def set_aside_count(self) -> int:
        """How many lines `rejected_path` holds: the entries `rejected` lists and the lines that are not
        entries (garbage, another format), which an operator must see too although they cannot be readmitted."""
        if not self.rejected_path.exists():
            return 0
        with self._locked():
            complete, _torn = split_lines(self.rejected_path.read_bytes())
        return sum(1 for raw in complete if raw.strip())

    def readmit(self, write_ids: Collection[UUID] | None = None) -> list[JournalEntry]:
        """Move entries an operator reviewed from `rejected_path` back into the journal, signed with this
        installation's key, so they are replayed: those with the given write ids, or every readable entry
        when None (e.g. the unsigned entries of a journal written before lines were signed). They go after
        the pending entries. Lines that are not entries stay in the rejected file. Returns the entries."""
        with self._locked():
            if not self.rejected_path.exists():
                return []
            complete, _torn = split_lines(self.rejected_path.read_bytes())
            back: list[JournalEntry] = []
            stay: list[bytes] = []
            for raw in complete:
                entry = parse_entry(raw) if raw.strip() else None  # `mac` and `error` are ignored
                if entry is not None and (write_ids is None or entry.write_id in write_ids):
                    back.append(entry)
                elif raw.strip():
                    stay.append(raw)
            for entry in back:
                append_durably(self.path, self._sign(entry.to_json()))
            replace_durably(self.rejected_path, stay)
        return back

    def discard(self, write_ids: Collection[UUID] | None = None) -> list[JournalEntry]:
        """Delete set-aside entries an operator reviewed and does not want written: those with the given write
        ids, or every readable entry when None. Lines that are not entries stay. Returns the entries deleted."""
        with self._locked():
            if not self.rejected_path.exists():
                return []
            complete, _torn = split_lines(self.rejected_path.read_bytes())
            gone: list[JournalEntry] = []
            stay: list[bytes] = []
            for raw in complete:
                entry = parse_entry(raw) if raw.strip() else None
                if entry is not None and (write_ids is None or entry.write_id in write_ids):
                    gone.append(entry)
                elif raw.strip():
                    stay.append(raw)
            replace_durably(self.rejected_path, stay)
        return gone

    # --- signing and rewriting (the caller holds the lock) ------------------------------------------------
    def _signing_key(self) -> bytes:
        if self._key is None:
            key = None if self._explicit_key_path else key_from_environment()
            legacy = self.path.parent / "journal.key"  # where earlier versions kept it
            if legacy != self.key_path and legacy.exists():
                if key is None and not self.key_path.exists():
                    adopt_key(legacy, self.key_path)
                else:
                    logger.warning(
                        "%s journal key %s beside the journals is not used (the key is %s): lines it signed are set"
                        " aside for review (`memory-plugin journal --readmit`); delete it once they are",
                        LOG_PREFIX,
                        legacy,
                        "MEMORY_JOURNAL_KEY" if key is not None else self.key_path,
                    )
            self._key = key if key is not None else load_or_create_key(self.key_path)
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
        return None if payload is None else parse_entry(payload)

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
        complete, _torn = split_lines(data)
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
        replace_durably(self.path, lines)
        return kept

    def _set_aside(self, raw: bytes, number: int) -> None:
        if self._verified(raw) is not None:
            why = "is not a journal entry"
        elif parse_entry(raw) is not None:
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
        append_durably(self.rejected_path, raw.decode("utf-8", errors="replace"))

    def _purge_rejected(self, user_id: UUID) -> None:
        complete, _torn = split_lines(self.rejected_path.read_bytes())
        mark = str(user_id).encode("ascii")
        kept = []
        for raw in complete:
            entry = self._parse(raw)
            mine = entry.user_id == user_id if entry is not None else mark in raw.lower()
            if raw.strip() and not mine:
                kept.append(raw)
        replace_durably(self.rejected_path, kept)
