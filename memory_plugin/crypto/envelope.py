"""Sealing one text: AES-GCM with a random 96-bit nonce per write, the row's owner and kind as associated data.

The stored form is `sealed:v1:<key id>:<base64url(nonce + ciphertext + tag)>`: the key id travels with the
row (the `user_memory.key_id` column is generated from it), so rows sealed under an old key still open while
that key is configured, and `rotate-key` finds them. The associated data is the owner's id, the row's kind and
category, and the key id: a ciphertext copied into another user's row, or relabelled, fails to open instead of
showing someone else's text. Sealing n bytes of UTF-8 stores 4/3 × (n + 28) + ~15 characters, so the column's
20,000-character check holds a sealed text of up to ~14,900 bytes (`max_sealed_bytes`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import TYPE_CHECKING
from uuid import UUID

from ..errors import EncryptionKeyError
from .keys import KeyRing

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["SEALED_PREFIX", "is_sealed", "max_sealed_bytes", "open_text", "seal_text", "sealed_hash", "sealed_key_id"]

SEALED_PREFIX = "sealed:v1:"
"""How a sealed `content` starts (the generated `key_id` column reads the id after it)."""
_NONCE_BYTES = 12  # AES-GCM's standard nonce; random per write (2^-32 collision bound at ~2^32 writes per key)
_HASH_PREFIX = "hmac:"


def _aesgcm(key: bytes) -> AESGCM:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - only without the extra
        raise EncryptionKeyError(
            "encryption keys are configured but the `cryptography` package is missing: pip install"
            " 'memory-plugin[crypto]'"
        ) from None
    return AESGCM(key)


def _associated_data(user_id: UUID, kind: str, category: str, key_id: str) -> bytes:
    return "\x1f".join(("memory_plugin:v1", str(user_id), kind, category, key_id)).encode()


def max_sealed_bytes(limit_chars: int, key_id: str) -> int:
    """The longest UTF-8 text (in bytes) whose sealed form fits in `limit_chars` characters."""
    room = (limit_chars - len(SEALED_PREFIX) - len(key_id) - 1) // 4 * 3
    return room - _NONCE_BYTES - 16


def is_sealed(content: str) -> bool:
    """Whether `content` is a sealed text."""
    return content.startswith(SEALED_PREFIX)


def sealed_key_id(content: str) -> str | None:
    """The id of the key `content` is sealed with (None: not sealed)."""
    if not is_sealed(content):
        return None
    return content[len(SEALED_PREFIX) :].partition(":")[0]


def seal_text(ring: KeyRing, text: str, *, user_id: UUID, kind: str, category: str) -> str:
    """`text` sealed under the ring's active key, bound to the owner, kind and category."""
    nonce = os.urandom(_NONCE_BYTES)
    aad = _associated_data(user_id, kind, category, ring.active)
    sealed = _aesgcm(ring.active_key).encrypt(nonce, text.encode("utf-8"), aad)
    return f"{SEALED_PREFIX}{ring.active}:{base64.urlsafe_b64encode(nonce + sealed).decode('ascii')}"


def open_text(ring: KeyRing | None, content: str, *, user_id: UUID, kind: str, category: str) -> str:
    """The plain text of a sealed `content` (a text that is not sealed is returned as is).

    Raises `EncryptionKeyError` when its key is not configured, or the text does not open with it (another
    key under the same id, a row moved to another user or kind, a damaged text): never returns ciphertext.
    """
    key_id = sealed_key_id(content)
    if key_id is None:
        return content
    if ring is None or key_id not in ring.keys:
        raise EncryptionKeyError(
            f"a memory is sealed with key {key_id!r}, which is not configured: add it to MEMORY_ENCRYPTION_KEYS"
            " (keep old keys until `memory-plugin rotate-key` has re-sealed every row)"
        )
    body = content[len(SEALED_PREFIX) + len(key_id) + 1 :]
    try:
        raw = base64.urlsafe_b64decode(body.encode("ascii"))
        from cryptography.exceptions import InvalidTag

        plain = _aesgcm(ring.keys[key_id]).decrypt(
            raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _associated_data(user_id, kind, category, key_id)
        )
    except (ValueError, UnicodeEncodeError, InvalidTag):
        raise EncryptionKeyError(
            f"a memory sealed with key {key_id!r} does not open with the configured key of that id: the key"
            " changed under the same id, or the row was altered or moved to another user"
        ) from None
    return plain.decode("utf-8")


def sealed_hash(ring: KeyRing, user_id: UUID, content_hash: str) -> str:
    """The `content_hash` of a sealed row: HMAC-SHA256 of the plain hash (the normalised text's SHA-256) with the
    ring's hash key and the owner, so exact repeats still meet on the unique key while the table holds nothing
    a dictionary of likely texts could be hashed against. Idempotent: a hash already keyed is kept."""
    if content_hash.startswith(_HASH_PREFIX):
        return content_hash
    digest = hmac.new(ring.hash_key, f"{user_id}|{content_hash}".encode(), hashlib.sha256).hexdigest()
    return _HASH_PREFIX + digest
