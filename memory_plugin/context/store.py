"""Where slots and rolling summaries live: `ContextStore`, in RAM or in Postgres under row-level security.

Postgres tables `memory_slots` and `memory_summaries` (supabase/migrations/…_context_memory.sql). Every
statement runs as the user (role `authenticated` with the user's JWT claims, transaction-local, as
PostgREST does), so RLS keeps users apart whatever this code does.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID

import psycopg
from psycopg import AsyncClientCursor
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..database.calls import IDENTITY_PRELUDE_SQL, postgres_errors, user_claims
from ..database.pooler import PoolerMode, connection_kwargs
from ..database.reach import open_pool
from ..errors import InvalidMemoryInputError, StoreError
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, UserPreferences, utc_now
from .receipt_store import KeyRing, PostgresReceipts, RamReceipts, ReceiptKeeper
from .slots import SlotPatch, Slots, patch_from_facts
from .store_sql import (
    ADD_SUMMARY_SQL,
    COPY_SUMMARY_SQL,
    CURRENT_SUMMARIES_SQL,
    DROP_LATEST_SQL,
    PATCH_SLOTS_SQL,
    PRUNE_SESSION_SUMMARIES_SQL,
    READ_SLOTS_SQL,
    SUMMARY_VERSIONS_SQL,
)

__all__ = [
    "SESSION_SUMMARIES_KEPT",
    "SESSION_SUMMARY_MAX_AGE_DAYS",
    "SUMMARY_VERSIONS_KEPT",
    "USER_SCOPE",
    "ContextStore",
    "InMemoryContextStore",
    "PostgresContextStore",
    "SummaryKind",
    "SummaryVersion",
    "apply_facts_to_slots",
    "session_scope",
]

SUMMARY_VERSIONS_KEPT = 3
"""Versions of each rolling summary kept for rollback (the newest is the current one)."""
SESSION_SUMMARIES_KEPT = 200
"""Sessions per user whose rolling summaries are kept on Postgres: a new session's summary deletes those of the
user's sessions beyond the newest 200 (by their last version), so a long-time user never reaches the database's
`summaries_per_user` limit (3,000 rows: 3 versions of 1,000 scopes)."""
SESSION_SUMMARY_MAX_AGE_DAYS = 90
"""A session summary not rewritten for this many days is deleted at the user's next session summary."""
SummaryKind = Literal["model", "extractive", "resync"]
"""Who wrote a summary: the summarizer model, the offline extractive fallback, or a resync from facts."""
USER_SCOPE = "user"
"""The summary scope of the user across sessions (what a new session starts from)."""


def session_scope(session_id: str) -> str:
    """The summary scope of one session (the user's own scope is `"user"`)."""
    return f"session:{session_id}"


def _check_scope(scope: str) -> str:
    if scope != USER_SCOPE and not (scope.startswith("session:") and len(scope) > len("session:")):
        raise InvalidMemoryInputError(f"summary scope must be 'user' or 'session:<id>', got {scope!r}")
    return scope


class SummaryVersion(BaseModel):
    """One version of a rolling summary."""

    model_config = ConfigDict(frozen=True)

    scope: str
    """`"user"` or `"session:<id>"`."""
    version: int = Field(ge=1)
    """1, 2, 3… (the newest is current)."""
    content: str
    """The summary text."""
    kind: SummaryKind
    """Who wrote it."""
    language: str | None = None
    """The conversation's language (`es`, `en`), when known."""
    message_count: int = Field(default=0, ge=0)
    """Messages the summary covers."""
    covered_until: datetime | None = None
    """Timestamp of the newest message it covers: later messages are new."""
    covered_from: datetime | None = None
    """Timestamp of the oldest message it covers; None when it also carries earlier sessions (a hand-over)
    or was rebuilt from the facts. A history reaching back this far makes the summary redundant."""
    resynced_at: datetime | None = None
    """When the summary was last rebuilt from the facts (the first version starts the clock)."""
    created_at: datetime = Field(default_factory=utc_now)
    """When it was written."""


class ContextStore(ReceiptKeeper, Protocol):
    """Slots and rolling summaries of users."""

    async def read_slots(self, user_id: UUID) -> Slots:
        """The user's slots (empty when none)."""
        ...

    async def patch_slots(self, user_id: UUID, patch: SlotPatch) -> bool:
        """Apply `patch` if every field it changes still holds `patch.expected`; False when one does not
        (re-read and retry). Fields the patch does not name are never touched."""
        ...

    async def summary_versions(self, user_id: UUID, scope: str) -> list[SummaryVersion]:
        """The kept versions of a summary, newest first ([] when none)."""
        ...

    async def read_turn(self, user_id: UUID, scopes: Sequence[str]) -> tuple[Slots, dict[str, SummaryVersion]]:
        """What a turn's context reads, together: the user's slots and the current summary of each of `scopes`
        (absent when none)."""
        ...

    async def add_summary(
        self,
        user_id: UUID,
        scope: str,
        content: str,
        *,
        kind: SummaryKind,
        language: str | None,
        message_count: int,
        covered_until: datetime | None = None,
        resynced_at: datetime | None = None,
        covered_from: datetime | None = None,
        copy_to: str | None = None,
    ) -> SummaryVersion:
        """Store a new current version; only the newest `SUMMARY_VERSIONS_KEPT` are kept. `copy_to`: also store it
        as a new version of that scope (without `covered_from`), in the same round trip. Returns `scope`'s."""
        ...

    async def drop_latest_summary(self, user_id: UUID, scope: str) -> SummaryVersion | None:
        """Roll back: delete the current version; the previous one (returned, None if none) is current again."""
        ...

    async def close(self) -> None:
        """Release connections (nothing to do in RAM)."""
        ...


async def apply_facts_to_slots(
    store: ContextStore,
    user_id: UUID,
    facts: Sequence[MemorizedFact] = (),
    *,
    superseded: Iterable[UUID] = (),
    preferences: UserPreferences | None = None,
    attempts: int = 5,
) -> Slots:
    """Patch the user's slots with newly stored facts and superseded fact ids; returns the slots after.

    Read, compute the field-level patch, compare-and-set; when another writer changed one of the same
    fields in between, read again and recompute (up to `attempts` times, then `StoreError`)."""
    gone = list(superseded)
    for _ in range(attempts):
        slots = await store.read_slots(user_id)
        patch = patch_from_facts(slots, facts, superseded=gone, preferences=preferences)
        if patch.is_empty():
            return slots
        if await store.patch_slots(user_id, patch):
            return patch.apply(slots)
        await asyncio.sleep(0)
    raise StoreError(f"the slots of user {user_id} kept changing under {attempts} patches; retry the write later")


class InMemoryContextStore(RamReceipts):
    """`ContextStore` in RAM (tests, and deployments without a database)."""

    def __init__(self) -> None:
        self._slots: dict[UUID, Slots] = {}
        self._summaries: dict[tuple[UUID, str], list[SummaryVersion]] = {}

    async def read_slots(self, user_id: UUID) -> Slots:
        """The user's slots."""
        return self._slots.get(user_id, Slots())

    async def patch_slots(self, user_id: UUID, patch: SlotPatch) -> bool:
        """Compare-and-set per field."""
        current = self._slots.get(user_id, Slots())
        if patch.conflicts_with(current):
            return False
        self._slots[user_id] = patch.apply(current)
        return True

    async def summary_versions(self, user_id: UUID, scope: str) -> list[SummaryVersion]:
        """Newest first."""
        return list(reversed(self._summaries.get((user_id, _check_scope(scope)), [])))

    async def read_turn(self, user_id: UUID, scopes: Sequence[str]) -> tuple[Slots, dict[str, SummaryVersion]]:
        """The slots and the current summaries."""
        current = {s: v[-1] for s in scopes if (v := self._summaries.get((user_id, _check_scope(s))))}
        return self._slots.get(user_id, Slots()), current

    async def add_summary(
        self,
        user_id: UUID,
        scope: str,
        content: str,
        *,
        kind: SummaryKind,
        language: str | None,
        message_count: int,
        covered_until: datetime | None = None,
        resynced_at: datetime | None = None,
        covered_from: datetime | None = None,
        copy_to: str | None = None,
    ) -> SummaryVersion:
        """A new current version (and one of `copy_to`)."""
        if copy_to is not None:
            await self.add_summary(
                user_id,
                copy_to,
                content,
                kind=kind,
                language=language,
                message_count=message_count,
                covered_until=covered_until,
                resynced_at=resynced_at,
            )
        versions = self._summaries.setdefault((user_id, _check_scope(scope)), [])
        latest = versions[-1].version if versions else 0
        added = SummaryVersion(
            scope=scope,
            version=latest + 1,
            content=content,
            kind=kind,
            language=language,
            message_count=message_count,
            covered_until=covered_until,
            resynced_at=resynced_at,
            covered_from=covered_from,
        )
        versions.append(added)
        del versions[:-SUMMARY_VERSIONS_KEPT]
        return added

    async def drop_latest_summary(self, user_id: UUID, scope: str) -> SummaryVersion | None:
        """Roll back one version."""
        versions = self._summaries.get((user_id, _check_scope(scope)), [])
        if versions:
            versions.pop()
        return versions[-1] if versions else None

    async def close(self) -> None:
        """Nothing to release."""


class PostgresContextStore(PostgresReceipts):
    """`ContextStore` on Postgres (tables `memory_slots` and `memory_summaries`), every statement as the user.

    Shares the long-term store's pool: `PostgresContextStore(postgres_store.pool)`."""

    def __init__(self, pool: AsyncConnectionPool[Any], *, owns_pool: bool = False, ring: KeyRing | None = None) -> None:
        self._pool = pool
        self._owns_pool = owns_pool
        """True when `close` closes the pool (the one `connect` opened); a pool handed in is its giver's."""
        self._ring = ring

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        max_size: int = 4,
        connect_timeout: float = 5.0,
        wait: bool = True,
        pooler: PoolerMode = "auto",
    ) -> PostgresContextStore:
        """A store with its own small pool on `url` (close it with `close`; `pooler`: see `database.pooler`);
        `wait=False` connects in the background (a failure then surfaces as `StoreError` on use)."""
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            timeout=connect_timeout,
            open=False,
            kwargs={**connection_kwargs(url, pooler), "autocommit": True},
            name="memory_plugin_context",
        )
        if wait:
            await open_pool(pool, url, seconds=connect_timeout, what="the context store ")  # names the cause
        else:
            await pool.open(wait=False)
        return cls(pool, owns_pool=True)

    async def close(self) -> None:
        """Close the pool if this store opened it."""
        if self._owns_pool:
            await self._pool.close()

    async def _run(self, user_id: UUID, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return (await self._run_all(user_id, [query], params))[-1]

    async def _run_all(
        self, user_id: UUID, statements: Sequence[str], params: dict[str, Any]
    ) -> list[list[tuple[Any, ...]]]:
        """`statements` as `user_id`, after the identity prelude, in one simple-protocol message: on the
        autocommit pool, one implicit transaction (the transaction-local role and claims cover the statements, so
        RLS applies and nothing leaks to the pool's next user) and one round trip, where BEGIN, prelude, query and
        COMMIT took four. Client-side binding is what allows parameters in a multi-statement message. Returns
        each statement's rows."""
        prelude = IDENTITY_PRELUDE_SQL.replace("%s", "%(claims)s")
        with postgres_errors("the context-memory operation"):
            async with self._pool.connection() as conn:
                cursor = AsyncClientCursor(conn, row_factory=tuple_row)
                values = {**params, "user": user_id, "claims": user_claims(user_id)}
                await cursor.execute("; ".join([prelude, *statements]), values)
                results: list[list[tuple[Any, ...]]] = []
                while cursor.nextset():  # the prelude's own result is skipped
                    results.append(await cursor.fetchall() if cursor.description else [])
                return results

    async def read_slots(self, user_id: UUID) -> Slots:
        """The user's slots; a field of the wrong shape (the row is writable by the user directly) is skipped
        with a warning."""
        rows = await self._run(user_id, READ_SLOTS_SQL, {})
        return _valid_slots(user_id, rows[0][0]) if rows else Slots()

    async def patch_slots(self, user_id: UUID, patch: SlotPatch) -> bool:
        """Compare-and-set per field, in one statement."""
        params = {"new": json.dumps(patch.new_json()), "expected": json.dumps(patch.expected_json())}
        return bool(await self._run(user_id, PATCH_SLOTS_SQL, params))

    async def summary_versions(self, user_id: UUID, scope: str) -> list[SummaryVersion]:
        """Newest first."""
        rows = await self._run(user_id, SUMMARY_VERSIONS_SQL, {"scope": _check_scope(scope)})
        versions = []
        for row in rows:
            try:
                versions.append(_summary(row))
            except ValidationError as exc:
                logger.warning("%s summary row of user %s skipped (not a valid summary): %s", LOG_PREFIX, user_id, exc)
        return versions

    async def read_turn(self, user_id: UUID, scopes: Sequence[str]) -> tuple[Slots, dict[str, SummaryVersion]]:
        """Slots and current summaries in one message: one round trip and one connection per turn, where three
        parallel reads of four round trips each took ~9 ms apiece on the 2-core bench."""
        params = {"scopes": [_check_scope(s) for s in scopes]}
        slot_rows, summary_rows = await self._run_all(user_id, [READ_SLOTS_SQL, CURRENT_SUMMARIES_SQL], params)
        current: dict[str, SummaryVersion] = {}
        for row in summary_rows:
            try:
                current[row[0]] = _summary(row)
            except ValidationError as exc:
                logger.warning("%s summary row of user %s skipped (not a valid summary): %s", LOG_PREFIX, user_id, exc)
        return (_valid_slots(user_id, slot_rows[0][0]) if slot_rows else Slots()), current

    async def add_summary(
        self,
        user_id: UUID,
        scope: str,
        content: str,
        *,
        kind: SummaryKind,
        language: str | None,
        message_count: int,
        covered_until: datetime | None = None,
        resynced_at: datetime | None = None,
        covered_from: datetime | None = None,
        copy_to: str | None = None,
    ) -> SummaryVersion:
        """A new current version, and one of `copy_to` in the same message (one round trip where the session
        summary and the user's copy took two); two writers racing for the same version number: the loser retries
        once (both statements: one implicit transaction)."""
        scope = _check_scope(scope)
        params = {
            "scope": scope,
            "content": content,
            "kind": kind,
            "language": language,
            "count": message_count,
            "covered": covered_until,
            "resynced": resynced_at,
            "covered_from": covered_from,
            "kept": SUMMARY_VERSIONS_KEPT,
        }
        statements = [ADD_SUMMARY_SQL]
        if scope.startswith("session:"):
            # The session summaries beyond the newest kept are pruned in the same message (one round trip).
            params |= {"keep": SESSION_SUMMARIES_KEPT - 1, "days": SESSION_SUMMARY_MAX_AGE_DAYS}
            statements.insert(0, PRUNE_SESSION_SUMMARIES_SQL)
        if copy_to is not None:
            params["copy_scope"] = _check_scope(copy_to)
            statements.append(COPY_SUMMARY_SQL)
        added = len(statements) - (2 if copy_to is not None else 1)
        try:
            rows = (await self._run_all(user_id, statements, params))[added]
        except StoreError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise
            rows = (await self._run_all(user_id, statements, params))[added]
        return _summary(rows[0])

    async def drop_latest_summary(self, user_id: UUID, scope: str) -> SummaryVersion | None:
        """Roll back one version."""
        await self._run(user_id, DROP_LATEST_SQL, {"scope": _check_scope(scope)})
        versions = await self.summary_versions(user_id, scope)
        return versions[0] if versions else None


# Lines of a stored summary that would read as a section of the memory block (context/budget.py renders the
# titles "Never suggest (the user rejected these):", "Relevant facts:", "Summary of the conversation so far:",
# slot lines "never suggest: …", "constraints: …", and fact lines "- [category] …"). Summaries are rows the user
# can write directly: such a line is kept, quoted, as content of the summary section.
_SECTION_LIKE = re.compile(
    r"-\s*\[|(?:never suggest|summary of the conversation|relevant facts|profile|goal|constraints|rejections"
    r"|preferences|schedule|targets|reminders|progress|materials)\b[^:\n]{0,60}:",
    re.IGNORECASE,
)


def fence_safe_summary(content: str) -> str:
    """`content` with every line that looks like a section of the memory block quoted (`- quoted: "…"`), so a
    stored summary cannot forge a section; the plugin's own summaries (bullets, headers) are unchanged."""
    lines = []
    for line in content.splitlines():
        stripped = line.strip()
        looks_like_section = stripped.startswith("- [") or (
            not stripped.startswith("- ") and _SECTION_LIKE.match(stripped) is not None
        )
        lines.append(f'- quoted: "{stripped}"' if looks_like_section else line)
    return "\n".join(lines)


def _valid_slots(user_id: UUID, document: Any) -> Slots:
    """The stored slot document, field by field: a field that is not a list of entries is skipped (warned)."""
    if not isinstance(document, dict):
        logger.warning("%s slots of user %s skipped: the stored document is not an object", LOG_PREFIX, user_id)
        return Slots()
    fields: dict[str, Any] = {}
    for name, value in document.items():
        try:
            Slots.from_json({name: value})
        except (ValidationError, TypeError, ValueError) as exc:
            logger.warning("%s slot field %r of user %s skipped (wrong shape): %s", LOG_PREFIX, name, user_id, exc)
        else:
            fields[name] = value
    return Slots.from_json(fields)


def _summary(row: Sequence[Any]) -> SummaryVersion:
    scope, version, content, kind, language, count, covered, resynced, covered_from, created = row
    return SummaryVersion(
        scope=scope,
        version=version,
        content=fence_safe_summary(content) if isinstance(content, str) else content,
        kind=kind,
        language=language,
        message_count=count,
        covered_until=covered,
        resynced_at=resynced,
        covered_from=covered_from,
        created_at=created,
    )
