"""Idempotent appends: an append carrying a key the chat has seen stores nothing again.

A client that retries an append (after a timeout, a 503, a dropped connection) cannot know whether the first
attempt committed, and `full_history` is never rewritten, so a blind retry would store its turns twice. The
client gives each logical append a key (the API's `Idempotency-Key` header); the store records it in the same
transaction as the turns, and a retry with the key is recognised: same request, nothing appended, the chat as
it is now; another request with the same key is refused (`IdempotencyKeyReusedError`, HTTP 422).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidMemoryInputError

__all__ = ["MAX_KEYS_PER_CHAT", "MAX_KEY_CHARS", "REUSED_MESSAGE", "AppendKey", "request_hash"]

MAX_KEY_CHARS = 255
"""Longest idempotency key (a UUID has 36 characters)."""
MAX_KEYS_PER_CHAT = 100
"""Keys remembered per chat, newest first: a retry comes within seconds; 100 appends later it is not a retry.
(The database function `chat_append` keeps the same number.)"""

REUSED_MESSAGE = (
    "this idempotency key was already used with a different request for this chat; nothing was appended (a retry"
    " sends the same request with its key; a new request needs a new key)"
)


def request_hash(payload: Any) -> str:
    """A hash of a request's JSON (keys sorted), to tell a retry from another request with the same key."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class AppendKey:
    """An append's idempotency key and the hash of the request it was first used with."""

    key: str
    """Chosen by the client, one per logical append, kept across its retries (e.g. a UUID)."""
    request_hash: str
    """`request_hash` of what the client sent: the same key with another request is a conflict."""

    def __post_init__(self) -> None:
        if not 1 <= len(self.key) <= MAX_KEY_CHARS or not self.key.isprintable() or not self.key.isascii():
            raise InvalidMemoryInputError(
                f"an idempotency key is 1 to {MAX_KEY_CHARS} printable ASCII characters (e.g. a UUID), got"
                f" {len(self.key)} characters"
            )
