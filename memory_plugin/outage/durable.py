"""Durable file primitives of the outage journal: appends and atomic rewrites that survive a crash (fsync of
the file and of its directory), torn last lines cut off, and the signing key created once, atomically."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

import platformdirs

from ..errors import InvalidMemoryInputError
from ..logs import LOG_PREFIX, logger

__all__ = [
    "KEY_BYTES",
    "KEY_DIR_ENV",
    "KEY_ENV",
    "adopt_key",
    "append_durably",
    "default_key_path",
    "key_from_environment",
    "load_or_create_key",
    "replace_durably",
    "split_lines",
]

KEY_BYTES = 32
KEY_ENV = "MEMORY_JOURNAL_KEY"
"""The journal key itself, 64 hex digits (e.g. from a secret store); wins over the key file."""
KEY_DIR_ENV = "MEMORY_JOURNAL_KEY_DIR"
"""The directory of the key file (`journal.key`); default: the user's config directory."""


def default_key_path() -> Path:
    """`journal.key` in `MEMORY_JOURNAL_KEY_DIR`, else in the user's config directory (e.g.
    ~/.config/memory-plugin): never in the data directory, so a copy of the journals does not carry the key
    that lets whoever holds it forge their lines."""
    configured = os.environ.get(KEY_DIR_ENV)
    base = Path(configured).expanduser() if configured else Path(platformdirs.user_config_dir("memory-plugin"))
    return base / "journal.key"


def key_from_environment() -> bytes | None:
    """The key `MEMORY_JOURNAL_KEY` holds (None when unset)."""
    value = os.environ.get(KEY_ENV, "").strip()
    if not value:
        return None
    try:
        key = bytes.fromhex(value)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise InvalidMemoryInputError(
            f"{KEY_ENV} must be {KEY_BYTES * 2} hex digits (e.g. the output of `openssl rand -hex {KEY_BYTES}`)"
        )
    return key


def adopt_key(old: Path, path: Path) -> None:
    """Move the key file `old` (a key kept beside the journals by an earlier version) to `path`, so the
    journals it signed stay readable; a key already at `path` (another process moved it first) is kept."""
    key = old.read_bytes()
    if len(key) == KEY_BYTES:
        _create_key_file(path, key)
    os.unlink(old)
    _fsync_dir(old.parent)
    logger.warning("%s journal key moved from %s to %s (not beside the journals)", LOG_PREFIX, old, path)


def load_or_create_key(path: Path) -> bytes:
    """The journal key at `path`, created (32 random bytes, 0600, durably, atomically) when missing. A key of
    the wrong size is set aside (renamed) and replaced: entries signed with it are then refused, not lost."""
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = b""
    else:
        if len(key) == KEY_BYTES:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
                logger.warning("%s journal key %s was readable by others: mode set to 0600", LOG_PREFIX, path)
            return key
        aside = path.with_name(f"{path.name}.invalid-{int(time.time())}")
        os.replace(path, aside)
        logger.warning(
            "%s journal key %s has %d bytes, not %d: moved to %s", LOG_PREFIX, path, len(key), KEY_BYTES, aside
        )
    return _create_key_file(path, secrets.token_bytes(KEY_BYTES))


def _create_key_file(path: Path, key: bytes) -> bytes:
    """Write `key` to `path` (0600, durably) unless a key is there already; returns the key at `path`."""
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


def split_lines(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines, and what follows the last newline (a torn line, or b"")."""
    *complete, torn = data.split(b"\n")
    return complete, torn


def replace_durably(path: Path, lines: Sequence[bytes]) -> None:
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


def append_durably(path: Path, line: str) -> None:
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
