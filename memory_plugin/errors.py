"""The plugin's exceptions: one small hierarchy users can catch.

`MemoryError` is a Python built-in (out of RAM), so the base is `MemoryPluginError`.
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = [
    "ConfigurationError",
    "EmbeddingError",
    "EncryptionKeyError",
    "ExportFormatError",
    "ExportVersionError",
    "ExtractionError",
    "IdempotencyKeyReusedError",
    "ImportConflictError",
    "InvalidMemoryInputError",
    "InvalidModelInputError",
    "ManagerClosedError",
    "MemoryLimitError",
    "MemoryPausedError",
    "MemoryPluginError",
    "SessionAmbiguousError",
    "SessionLimitError",
    "SessionOwnershipError",
    "StatementLimitError",
    "StoreError",
    "StoreLimitError",
    "StorePausedError",
    "StoreUnavailableError",
]


class MemoryPluginError(Exception):
    """Base class of every error the plugin raises on purpose."""


class InvalidMemoryInputError(MemoryPluginError, ValueError):
    """The caller passed something the memory cannot store (empty text, NUL bytes, an unknown category, a
    user id that is not a UUID, a message over the size limit...). Nothing was written."""


class SessionOwnershipError(InvalidMemoryInputError):
    """A call without a user named a session that belongs to a user. Sessions are kept per user (two users
    may each have a session `chat-1`; sessions started without a user are a namespace of their own): a read
    without a user sees only anonymous sessions, so pass the session's user_id."""


class SessionAmbiguousError(SessionOwnershipError):
    """A write without a user (`add_message(session_id, message)`, the design's session-only calls) named a
    session id that more than one owner uses (two users, or a user and an anonymous session): nothing was
    written; pass the user_id of the session the call is for."""


class SessionLimitError(InvalidMemoryInputError):
    """A short-term update would take a session past one of its limits (entity values per kind or in all,
    intents); nothing of that update was kept. The limits are `MemorySettings.max_session_entity_values_per_kind`,
    `max_session_entity_values` and `max_session_intents`."""


class IdempotencyKeyReusedError(InvalidMemoryInputError):
    """An idempotency key was sent again with a different request (another body for the same chat). Nothing
    was appended: a retry must send the same request with its key, and a new request needs a new key."""


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


class StatementLimitError(StoreError):
    """The database is reachable but cancelled or refused one statement for its duration or size (its
    `statement_timeout`, `lock_timeout`, or a server limit such as memory or statement complexity). Nothing of
    that statement was written, and sending it again fails the same way: write fewer items per call, or raise
    the limit (`limit` names it). Never an outage: it is raised to the caller, not journaled."""

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit
        """The limit that stopped the statement, e.g. "statement_timeout", "lock_timeout", "out_of_memory"."""


class StoreLimitError(MemoryLimitError, StoreError):
    """The database refused a write past one of the bounds it enforces itself (a count per user, the write rate,
    a size: `supabase/schemas/15_memory_bounds.sql`); nothing of that write was stored. Both a `MemoryLimitError`
    (what the caller can act on) and a `StoreError` (the database refused it, as the outage journal expects)."""


class ExtractionError(MemoryPluginError):
    """Fact extraction failed: the model errored or its output could not be used at all.

    Partial output is not an error: invalid items are dropped one by one and counted in
    `MemoryManager.stats`.
    """


class EmbeddingError(MemoryPluginError):
    """The embedding model failed or returned unusable vectors. Writes still store the facts (without a vector,
    counted in `MemoryManager.stats.embedding_failures`) and searches fall back to text signals."""


class ExportFormatError(InvalidMemoryInputError):
    """A file given to import is not a memory export this release can restore: not JSON, not the export
    format, or a row that does not fit its table. Nothing was written."""


class ExportVersionError(ExportFormatError):
    """An export of another format version than this release reads (`memory_plugin.export.EXPORT_VERSION`).
    Nothing was written; import it with the release that wrote it, or a later one that reads its version."""


class ImportConflictError(MemoryPluginError):
    """An import found memory of the user already in the database (or a row id of the file in use): imports
    never merge. Nothing was written; erase the user first to replace their memory with the file's."""


class ConfigurationError(MemoryPluginError, ValidationError):
    """A `MEMORY_*` environment variable (or `MemorySettings` argument) cannot be used: its message names the
    variable and shows a valid value. It is pydantic's `ValidationError` too, like every other bad setting."""


class MemoryPausedError(MemoryPluginError):
    """The user paused their memory (`MemoryManager.pause_memory`): nothing new is stored about them until they
    resume it. Nothing was written; reads still work."""


class StorePausedError(MemoryPausedError, StoreError):
    """The database refused a write about a user who paused their memory (SQLSTATE PT423,
    `supabase/schemas/81_memory_consent.sql`); nothing of that write was stored. Both a `MemoryPausedError` (what
    the caller can act on) and a `StoreError` (the database refused it, so the outage journal does not keep it)."""


class EncryptionKeyError(MemoryPluginError):
    """A sealed memory cannot be written or read with the keys configured: a write marked sensitive without
    `MEMORY_ENCRYPTION_KEYS`, or a row sealed with a key that is not configured (or does not open with it). The
    message says which key id; nothing is returned in its place (no ciphertext ever reaches a prompt)."""
