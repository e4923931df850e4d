"""Idempotent turn finishes kept in Postgres (`memory_private.memory_turn_keys`,
supabase/schemas/36_memory_turn_keys.sql), so a retried `POST /api/memory/turns` records the exchange once
whichever API worker it reaches, and after a restart.

The same rules as the in-process `TurnKeys` (turn_keys.py): the same key and body answer the first finish's
outcome; the same key with another body is refused (422); a failed or unrecorded attempt forgets its key, so its
retry runs. Concurrent attempts: in one worker a retry waits for the running attempt (the in-process keys sit in
front); an attempt that meets a claim another worker is running gets 409 `turn_in_progress` (retry in a few
seconds): waiting across workers would hold a request and a pool connection per waiter for as long as a model
call takes, and a 409 is what a client that retries already handles.

The stored answer keeps no fact text: the facts a finish stored (`stored[*]`) are kept by id and category, and a
replay reads their current text (a sealed fact opened with the store's keys, "" when it does not open or the fact
was deleted since), as context receipts do, so a sealed fact's text is never written outside `user_memory`.

A running claim is renewed every `LEASE_SECONDS / 3`; a claim not renewed for `LEASE_SECONDS` (its worker
died) is taken over by the next attempt. Not covered: a worker that dies after the exchange was recorded and
before its outcome is stored leaves a claim that a retry takes over, recording the exchange again (the session
write and the key cannot share one transaction: the finish spans several, and maybe a model call).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar
from uuid import UUID

from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from ..chats.idempotency import AppendKey
from ..crypto import KeyRing, is_sealed, open_text
from ..database.calls import IDENTITY_PRELUDE_SQL, postgres_errors, user_claims
from ..errors import EncryptionKeyError, IdempotencyKeyReusedError
from .errors import ApiError
from .turn_keys import REUSED_TURN_MESSAGE, TurnKeys

__all__ = ["LEASE_SECONDS", "PostgresTurnKeys"]

logger = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
"""A running claim not renewed for this long is taken over: its owner renews it every 10 s, so only a dead worker
(or one cut from the database for 30 s) loses it; a retry after a crash waits at most this long (409s)."""

IN_PROGRESS_MESSAGE = (
    "another attempt of this turn (the same idempotency key) is still running: retry in a few seconds with the same"
    " key and body"
)

_CLAIM_SQL = "select state, claim_id, outcome from public.memory_turn_key_claim(%s, %s, %s, %s::real)"
_DONE_SQL = (
    "update memory_private.memory_turn_keys set state = 'done', outcome = %s"
    " where user_id = %s and key = %s and claim_id = %s"
)
_FORGET_SQL = "delete from memory_private.memory_turn_keys where user_id = %s and key = %s and claim_id = %s"
_RENEW_SQL = (
    "update memory_private.memory_turn_keys set claimed_at = now()"
    " where user_id = %s and key = %s and claim_id = %s and state = 'running'"
)
_TEXTS_SQL = "select id, content, kind, category from public.user_memory where user_id = %s and id = any(%s::uuid[])"

M = TypeVar("M", bound=BaseModel)


class PostgresTurnKeys(Generic[M]):
    """The idempotency keys of turn finishes, in Postgres (module docstring); answers are `model`s, whose
    `stored` facts (if any) are kept without their text (`ring`: the keys that open sealed ones on a replay)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        model: type[M],
        *,
        local: TurnKeys | None = None,
        lease_seconds: float = LEASE_SECONDS,
        ring: KeyRing | None = None,
    ) -> None:
        self._pool = pool
        self._ring = ring
        self._model = model
        self._local = local if local is not None else TurnKeys()
        self._lease = lease_seconds

    async def once(self, user: UUID, key: AppendKey, work: Callable[[], Awaitable[M]], keep: Callable[[M], bool]) -> M:
        """`work()`'s result, run once per (`user`, `key.key`) across every worker on this database: a retry with
        the same request hash gets the first result; another hash raises `IdempotencyKeyReusedError`; a claim
        another worker runs raises `ApiError` 409 `turn_in_progress`. A result `keep` refuses, or an exception,
        forgets the key."""
        return await self._local.once(user, key, lambda: self._claimed(user, key, work, keep), keep)

    async def _claimed(
        self, user: UUID, key: AppendKey, work: Callable[[], Awaitable[M]], keep: Callable[[M], bool]
    ) -> M:
        row = None
        for _ in range(3):  # no row: the claim was deleted (its attempt failed) between two statements: claim again
            row = await self._run(
                user,
                "claiming the turn's idempotency key",
                _CLAIM_SQL,
                (user, key.key, key.request_hash, self._lease),
                fetch=True,
            )
            if row is not None:
                break
        if row is None or row[0] == "running":
            raise ApiError(409, "turn_in_progress", IN_PROGRESS_MESSAGE, headers={"Retry-After": "2"})
        state, claim, outcome = row
        if state == "conflict":
            raise IdempotencyKeyReusedError(REUSED_TURN_MESSAGE)
        if state == "done":
            return self._model.model_validate(await self._with_texts(user, outcome))
        slot = (user, key.key, claim)
        renew = asyncio.create_task(self._renew(slot))
        try:
            value = await work()
        except BaseException:
            renew.cancel()
            await asyncio.shield(self._settle(slot, None))
            raise
        renew.cancel()
        await asyncio.shield(self._settle(slot, value if keep(value) else None))
        return value

    async def _renew(self, slot: tuple[UUID, str, UUID]) -> None:
        while True:
            await asyncio.sleep(self._lease / 3)
            try:
                await self._run(slot[0], "renewing the turn's idempotency key", _RENEW_SQL, slot)
            except Exception as exc:  # the next renewal may pass; the lease covers two misses
                logger.warning("renewing a turn's idempotency key failed: %s", exc)

    async def _settle(self, slot: tuple[UUID, str, UUID], value: M | None) -> None:
        """Store the answer, or forget the claim (None). A failure is logged, not raised: the turn's answer stands,
        and an unsettled claim is taken over once its lease runs out."""
        try:
            if value is None:
                await self._run(slot[0], "forgetting the turn's idempotency key", _FORGET_SQL, slot)
            else:
                params = (Jsonb(_without_texts(value.model_dump(mode="json"))), *slot)
                await self._run(slot[0], "storing the turn's answer for its retries", _DONE_SQL, params)
        except Exception as exc:
            logger.warning("settling a turn's idempotency key failed (its lease runs out): %s", exc)

    async def _with_texts(self, user: UUID, outcome: dict[str, Any]) -> dict[str, Any]:
        facts = outcome.get("stored") or []
        if not facts:
            return outcome
        rows = await self._run(
            user, "reading the turn's stored facts", _TEXTS_SQL, (user, [f["id"] for f in facts]), fetch=True, many=True
        )
        texts = {str(r[0]): self._shown(user, *r[1:]) for r in rows or []}
        return {**outcome, "stored": [{**f, "content": texts.get(str(f["id"]), "")} for f in facts]}

    def _shown(self, user: UUID, content: str, kind: str, category: str) -> str:
        if not is_sealed(content):
            return content
        try:
            return open_text(self._ring, content, user_id=user, kind=kind, category=category)
        except EncryptionKeyError:
            return ""

    async def _run(
        self, user: UUID, doing: str, query: str, params: tuple[Any, ...], *, fetch: bool = False, many: bool = False
    ) -> Any:
        """Run `query` as `user` (RLS); its first row (`fetch`), all rows (`many`) or None."""
        with postgres_errors(doing):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(IDENTITY_PRELUDE_SQL, (user_claims(user),))
                cursor = conn.cursor(row_factory=tuple_row)
                await cursor.execute(query, params)
                if many:
                    return await cursor.fetchall()
                return await cursor.fetchone() if fetch else None


def _without_texts(outcome: dict[str, Any]) -> dict[str, Any]:
    """`outcome` with its stored facts' texts left out (module docstring)."""
    facts = outcome.get("stored")
    if not facts:
        return outcome
    return {**outcome, "stored": [{k: v for k, v in f.items() if k != "content"} for f in facts]}
