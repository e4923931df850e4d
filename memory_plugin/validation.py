"""Checks every public entry point runs on its input before anything is read or written.

Each raises `InvalidMemoryInputError` with what was wrong and what is accepted.
"""

from __future__ import annotations

from uuid import UUID

from .errors import InvalidMemoryInputError
from .text import unstorable_reason

__all__ = [
    "MAX_ENTITY_CHARS",
    "MAX_SESSION_ID_CHARS",
    "check_session_id",
    "check_text",
    "parse_item_id",
    "parse_user_id",
]

MAX_SESSION_ID_CHARS = 256
MAX_ENTITY_CHARS = 200
"""Entity kinds and values, intents, and `search_text` needles."""


def parse_user_id(user_id: str | UUID) -> UUID:
    """The user id as a UUID (Supabase Auth user ids are UUIDs)."""
    if isinstance(user_id, UUID):
        return user_id
    try:
        return UUID(str(user_id))
    except ValueError:
        raise InvalidMemoryInputError(
            f"user_id must be a UUID (as Supabase Auth user ids are), got {user_id!r}"
        ) from None


def parse_item_id(item_id: str | UUID) -> UUID:
    """A stored memory's id as a UUID."""
    if isinstance(item_id, UUID):
        return item_id
    try:
        return UUID(str(item_id))
    except ValueError:
        raise InvalidMemoryInputError(f"memory item ids are UUIDs, got {item_id!r}") from None


def check_session_id(session_id: str) -> str:
    """A non-empty session id without NUL, at most `MAX_SESSION_ID_CHARS` characters."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise InvalidMemoryInputError("session_id must be a non-empty string")
    if unstorable_reason(session_id) or len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidMemoryInputError(
            f"session_id must have no NUL or lone surrogate and at most {MAX_SESSION_ID_CHARS} characters"
        )
    return session_id


def check_text(value: str, what: str, limit: int) -> str:
    """`value`, if Postgres can store it (no NUL, no lone surrogate) and it is at most `limit` characters long."""
    if reason := unstorable_reason(value):
        raise InvalidMemoryInputError(f"{what} {reason}")
    if len(value) > limit:
        raise InvalidMemoryInputError(f"{what} is {len(value):,} characters; the limit is {limit:,}")
    return value
