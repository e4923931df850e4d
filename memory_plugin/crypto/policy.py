"""Which items are sealed: the ones the application marks, and facts of the sensitive categories."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from ..errors import EncryptionKeyError, InvalidMemoryInputError
from ..rows import MemoryItem
from .envelope import is_sealed

__all__ = ["mark_sensitive"]


def mark_sensitive(items: Sequence[MemoryItem], categories: Collection[str], *, encrypting: bool) -> list[MemoryItem]:
    """`items` with `sensitive` set on every fact of `categories` when `encrypting` (keys are configured), so
    the write skips their embedding (a vector of a secret can be inverted to text close to it) before the store
    seals them. Without keys an item the caller marked sensitive raises `EncryptionKeyError` (nothing is
    written); the categories alone then change nothing (a deployment without keys stores them as before). A text
    starting with the sealed marker is refused (`InvalidMemoryInputError`): it would read back as a sealed row."""
    if any(is_sealed(item.content) for item in items):
        raise InvalidMemoryInputError(
            "a memory may not start with 'sealed:v1:' (the marker of encrypted rows): reword it"
        )
    if not encrypting:
        if any(item.sensitive for item in items):
            raise EncryptionKeyError(
                "a memory marked sensitive cannot be stored without encryption keys: set MEMORY_ENCRYPTION_KEYS and"
                " MEMORY_ENCRYPTION_HASH_KEY (docs/privacy.md), or store it without sensitive=True"
            )
        return list(items)
    return [
        replace(item, sensitive=True)
        if not item.sensitive and item.kind == "fact" and item.category in categories
        else item
        for item in items
    ]
