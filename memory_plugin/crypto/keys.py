"""`KeyRing`: the encryption keys by id, which one seals new writes, and the separate key of the content hash.

Read from three settings (text, so they can come from the environment or a secret manager):
`MEMORY_ENCRYPTION_KEYS` (`id:base64` pairs, comma-separated), `MEMORY_ENCRYPTION_ACTIVE_KEY` (the id new writes
use; the first pair when unset) and `MEMORY_ENCRYPTION_HASH_KEY` (base64; keys the content hash, so exact repeats
of a sealed fact still reinforce it without a plain SHA-256 of the text in the table). Malformed text is refused
with the variable's name and an example, as every other setting.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["KEY_EXAMPLE", "KeyRing", "parse_key_ring"]

KEY_EXAMPLE = "MEMORY_ENCRYPTION_KEYS=k1:$(openssl rand -base64 32)"
"""What a valid value looks like (shown in every error about the keys)."""
HASH_KEY_EXAMPLE = "MEMORY_ENCRYPTION_HASH_KEY=$(openssl rand -base64 32)"
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_AES_KEY_BYTES = (16, 24, 32)
_MIN_HASH_KEY_BYTES = 16


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The keys a process can open rows with, the one it seals new rows with, and the content-hash key."""

    keys: Mapping[str, bytes]
    """AES keys by id (16, 24 or 32 bytes; 32 is AES-256)."""
    active: str
    """The id of the key new writes and `rotate-key` use (one of `keys`)."""
    hash_key: bytes
    """The HMAC-SHA256 key of the sealed rows' `content_hash` (independent of the AES keys: rotating them keeps
    every hash, so repeats still find their row)."""

    def __post_init__(self) -> None:
        if self.active not in self.keys:
            raise ValueError(f"the active key {self.active!r} is not among the keys {sorted(self.keys)}")

    def __repr__(self) -> str:  # never print key material
        return f"KeyRing(keys={sorted(self.keys)}, active={self.active!r})"

    @property
    def active_key(self) -> bytes:
        """The AES key new writes are sealed with."""
        return self.keys[self.active]


def _b64(text: str, what: str, example: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not base64; e.g. {example}") from None


def parse_key_ring(keys: str, active: str | None, hash_key: str | None) -> KeyRing:
    """The key ring from the settings' text, or ValueError naming the variable at fault and an example."""
    parsed: dict[str, bytes] = {}
    for pair in (p.strip() for p in keys.split(",")):
        key_id, sep, material = pair.partition(":")
        if not sep or not _KEY_ID.fullmatch(key_id.strip()):
            raise ValueError(
                f"MEMORY_ENCRYPTION_KEYS must be comma-separated id:base64 pairs (ids of letters, digits, _ or -,"
                f" at most 32), e.g. {KEY_EXAMPLE}; got an entry without a valid id"
            )
        key_id = key_id.strip()
        raw = _b64(material, f"MEMORY_ENCRYPTION_KEYS' key {key_id!r}", KEY_EXAMPLE)
        if len(raw) not in _AES_KEY_BYTES:
            raise ValueError(
                f"MEMORY_ENCRYPTION_KEYS' key {key_id!r} is {len(raw)} bytes; AES needs 16, 24 or 32 (32"
                f" recommended), e.g. {KEY_EXAMPLE}"
            )
        if key_id in parsed:
            raise ValueError(f"MEMORY_ENCRYPTION_KEYS names key {key_id!r} twice; give each key one id")
        parsed[key_id] = raw
    chosen = (active or "").strip() or next(iter(parsed))
    if chosen not in parsed:
        raise ValueError(
            f"MEMORY_ENCRYPTION_ACTIVE_KEY={chosen!r} is not one of MEMORY_ENCRYPTION_KEYS' ids {sorted(parsed)}"
        )
    if not hash_key:
        raise ValueError(f"MEMORY_ENCRYPTION_HASH_KEY is required with MEMORY_ENCRYPTION_KEYS, e.g. {HASH_KEY_EXAMPLE}")
    hashing = _b64(hash_key, "MEMORY_ENCRYPTION_HASH_KEY", HASH_KEY_EXAMPLE)
    if len(hashing) < _MIN_HASH_KEY_BYTES:
        raise ValueError(
            f"MEMORY_ENCRYPTION_HASH_KEY is {len(hashing)} bytes; use at least {_MIN_HASH_KEY_BYTES},"
            f" e.g. {HASH_KEY_EXAMPLE}"
        )
    return KeyRing(parsed, chosen, hashing)
