"""Encryption at rest of the facts an application marks sensitive: pure functions over keys it is given.

`keys.py` reads the key ring from settings text (`MEMORY_ENCRYPTION_KEYS`…); `envelope.py` seals a text into
the stored form (AES-256-GCM, random nonce, the row's owner and kind as associated data) and opens it again,
and keys the content hash with HMAC. Nothing here does I/O: the store wrapper `store/sealed.py` applies it at
the one boundary every read and write of `user_memory` crosses, and `database/rekey.py` re-seals stored rows
under the active key (`memory-plugin rotate-key`). `cryptography` is imported only when a key is used, so a
deployment without keys does not need it (the `crypto` extra).
"""

from __future__ import annotations

from .envelope import SEALED_PREFIX, is_sealed, open_text, seal_text, sealed_hash, sealed_key_id
from .keys import KeyRing, parse_key_ring

__all__ = [
    "SEALED_PREFIX",
    "KeyRing",
    "is_sealed",
    "open_text",
    "parse_key_ring",
    "seal_text",
    "sealed_hash",
    "sealed_key_id",
]
