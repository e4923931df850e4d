"""The plugin's exceptions: one small hierarchy users can catch.

`MemoryError` is a Python built-in (out of RAM), so the base is `MemoryPluginError`.
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = [
    "ConfigurationError",
    "EmbeddingError",
    "ExtractionError",
    "InvalidMemoryInputError",
    "InvalidModelInputError",
    "ManagerClosedError",
    "MemoryLimitError",
    "MemoryPluginError",
    "SessionLimitError",
    "SessionOwnershipError",
    "StoreError",
    "StoreUnavailableError",
]


class MemoryPluginError(Exception):
    """Base class of every error the plugin raises on purpose."""


class InvalidMemoryInputError(MemoryPluginError, ValueError):
    """The caller passed something the memory cannot store (empty text, NUL bytes, an unknown category, a
    user id that is not a UUID, a message over the size limit...). Nothing was written."""


class SessionOwnershipError(InvalidMemoryInputError):
    """A session id was used with another user than the one it belongs to. A session is bound to the user
    of its first call (or to no user, when that call named none) until it expires or is dropped; use a
    session id of the user's own (for example one made of the user id and the conversation id)."""


class SessionLimitError(InvalidMemoryInputError):
    """A short-term update would take a session past one of its limits (entity values per kind or in all,
    intents); nothing of that update was kept. The limits are `MemorySettings.max_session_entity_values_per_kind`,
    `max_session_entity_values` and `max_session_intents`."""


class InvalidModelInputError(InvalidMemoryInputError, ValidationError):
    """A public model (`Message`, `MemorizedFact`, `MemoryUpdate`, `Note`…) was built from bad values. It is
    pydantic's `ValidationError` too, so its message lists each field and the reason, and code that catches
    either keeps working."""


class MemoryLimitError(MemoryPluginError):
    """A documented limit was reached (writes per user and minute, facts per user, sizes). Nothing was written;
    `retry_after` says when a rate limit lets the same write through (None when waiting does not help)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds to wait before retrying, for a rate limit."""


class ManagerClosedError(MemoryPluginError):
    """The `MemoryManager` was closed (its `async with` block ended): open a new one."""


class StoreError(MemoryPluginError):
    """The long-term store failed to carry out an operation."""


class StoreUnavailableError(StoreError):
    """The long-term store cannot be reached (database down, network, pool exhausted)."""


class ExtractionError(MemoryPluginError):
    """Fact extraction failed: the model errored or its output could not be used at all.

    Partial output is not an error: invalid items are dropped one by one and counted in
    `MemoryManager.stats`.
    """


class EmbeddingError(MemoryPluginError):
    """The embedding model failed or returned unusable vectors. Writes still store the facts (without a vector,
    counted in `MemoryManager.stats.embedding_failures`) and searches fall back to text signals."""


class ConfigurationError(MemoryPluginError, ValidationError):
    """A `MEMORY_*` environment variable (or `MemorySettings` argument) cannot be used: its message names the
    variable and shows a valid value. It is pydantic's `ValidationError` too, like every other bad setting."""
