"""Short-term memory: the sessions of a conversation, their backend and their bounds (`settings.sessions`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from .flat import Flat, SettingsGroup

__all__ = ["SessionBackend", "SessionNames", "SessionSettings"]

SessionBackend = Literal["memory", "postgres", "redis"]
"""Where short-term sessions live (`settings.sessions.backend`)."""


class SessionSettings(SettingsGroup):
    """Short-term sessions (`settings.sessions`): where they live, how long, how much each holds."""

    max_messages: int = Field(default=20, ge=1)
    """Messages kept per session; older ones fall off."""

    ttl_seconds: float = Field(default=3600.0, gt=0)
    """A session untouched for this long is forgotten (1 hour by default)."""

    max_sessions: int = Field(default=100_000, ge=1)
    """Live sessions kept in RAM; beyond this the least recently active session is evicted."""

    max_message_chars: int = Field(default=20_000, ge=1)
    """Longest message accepted; longer input raises `InvalidMemoryInputError` instead of being truncated."""

    store_max_bytes: int = Field(default=512 * 1024 * 1024, ge=64 * 1024)
    """RAM budget of all sessions together, in (estimated) bytes: beyond it the least recently active sessions
    are evicted. A session is estimated from its text (messages, entity values, intents) plus a fixed cost per
    object fitted with `tracemalloc` (`session/store.py`; within 6 % of the RAM traced). 512 MiB holds the
    100,000 sessions of `max_sessions` with 2 short messages each (~3.6 kB), ~27,000 sessions of 20 messages
    of 300 characters (~19 kB), or ~1,300 full of the longest messages (20 × 20,000 characters, ~0.4 MB)."""

    max_per_user: int = Field(default=100, ge=1)
    """Live sessions of one user; a new one beyond it evicts that user's least recently active session, so a
    user opening sessions in a loop evicts their own, never another user's. Sessions used without a user are
    bounded only by `max_sessions` and `session_store_max_bytes`."""

    max_bytes_per_user: int = Field(default=16 * 1024 * 1024, ge=64 * 1024)
    """RAM budget of one user's sessions (estimated bytes, as `session_store_max_bytes`); beyond it that user's
    least recently active sessions are evicted (never the one being written). 16 MiB: ~40 sessions full of
    the longest messages, far more than a person has open at once."""

    max_entity_values_per_kind: int = Field(default=50, ge=1)
    """Entity values kept per kind in a session ("materials": 50 distinct materials); an update past it
    raises `SessionLimitError` and keeps nothing of that update."""

    max_entity_values: int = Field(default=200, ge=1)
    """Entity values of all kinds kept in a session (each value reaches the prompt); past it an update raises
    `SessionLimitError`."""

    max_intents: int = Field(default=50, ge=1)
    """Distinct intents kept in a session; a new one past it raises `SessionLimitError`."""

    sweep_interval_seconds: float = Field(default=60.0, gt=0)
    """How often the manager's background task releases expired sessions' RAM. Expired sessions are never
    visible even between sweeps: every access expires what is due first."""

    backend: SessionBackend = "memory"
    """Where short-term sessions live: "memory" (this process's RAM), "postgres" (the database in use, shared
    by every worker; `memory_private.memory_sessions`) or "redis" (`redis_url`, shared by every worker; the
    `redis` extra)."""

    redis_url: SecretStr | None = None
    """The Redis server of `session_backend="redis"` (`redis://host:6379/0`; may carry a password)."""

    max_checkpoints: int = Field(default=20, ge=1, le=10_000)
    """Workflow checkpoints kept per session; each save deletes the older ones beyond it."""


class SessionNames:
    """The flat names (and `MEMORY_*` variables) of `SessionSettings`' fields."""

    max_messages_per_session = Flat[int]("sessions.max_messages")
    session_ttl_seconds = Flat[float]("sessions.ttl_seconds")
    max_sessions = Flat[int]("sessions.max_sessions")
    max_message_chars = Flat[int]("sessions.max_message_chars")
    session_store_max_bytes = Flat[int]("sessions.store_max_bytes")
    max_sessions_per_user = Flat[int]("sessions.max_per_user")
    session_max_bytes_per_user = Flat[int]("sessions.max_bytes_per_user")
    max_session_entity_values_per_kind = Flat[int]("sessions.max_entity_values_per_kind")
    max_session_entity_values = Flat[int]("sessions.max_entity_values")
    max_session_intents = Flat[int]("sessions.max_intents")
    session_sweep_interval_seconds = Flat[float]("sessions.sweep_interval_seconds")
    session_backend = Flat[SessionBackend]("sessions.backend")
    redis_url = Flat[SecretStr | None]("sessions.redis_url")
    max_checkpoints = Flat[int]("sessions.max_checkpoints")
