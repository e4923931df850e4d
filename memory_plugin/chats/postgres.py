"""`PostgresChatStore`: chats in `public.chats`, every statement run as the user under RLS.

Each operation is one statement, prefixed (in the same message, hence the same implicit transaction) by the
prelude `PostgresStore` uses: `role = authenticated` and the user's JWT claims, transaction-local. So a bug in
Python cannot reach another user's chat: the database answers "no row".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..database.calls import IDENTITY_PRELUDE_SQL, postgres_errors, run_after_prelude, user_claims
from ..errors import IdempotencyKeyReusedError, StoreError
from .idempotency import REUSED_MESSAGE, AppendKey
from .rows import ChatHit, ChatRow, MessageJson
from .store import ChatSearch, SummaryUpdate

__all__ = ["PostgresChatStore"]

_COLUMNS = (
    "id, user_id, title, title_is_user, title_terms, full_history, assistant_history, summary_text,"
    " summary_embedding::text as summary_embedding, summary_model, turn_count, summary_turn_count,"
    " compaction_epoch, last_activity_at, created_at"
)
CREATE_SQL = (
    "insert into public.chats (user_id, title, title_is_user, full_history, assistant_history, turn_count)"
    f" values (%s, %s, %s, %s::jsonb, %s::jsonb, %s) returning {_COLUMNS}"
)
# `public.chat_create` (35_chat_create.sql): the chat and its creating key in one statement.
CREATE_KEYED_SQL = (
    f"select a.outcome, {_COLUMNS} from public.chat_create(%s, %s, %s::jsonb, %s, %s) a"
    " cross join lateral (select (a.chat).*) c"
)
GET_SQL = f"select {_COLUMNS} from public.chats where user_id = %s and id = %s"
LIST_SQL = (
    f"select {_COLUMNS}, count(*) over () as total from public.chats where user_id = %s"
    " order by last_activity_at desc, id desc limit %s offset %s"
)
COUNT_SQL = "select count(*) as total from public.chats where user_id = %s"
# `public.chat_append` (one UPDATE, whose row lock serialises concurrent appends; with an idempotency key, the
# key is checked and stored in the same transaction). Its row is expanded to the columns the other reads return.
# `python -m bench.chat_append` (a chat growing to 1,000 turns): p50 1.01x the bare UPDATE it replaced without
# a key, 1.05x with one; the statement's cost is rewriting the row's histories, not the key.
APPEND_SQL = (
    f"select a.outcome, {_COLUMNS} from public.chat_append(%s, %s, %s::jsonb, %s, %s) a"
    " cross join lateral (select (a.chat).*) c"
)
# Replaces the first `drop` elements of the *current* assistant_history (turns appended since the compaction
# was computed sit after them and are kept); the epoch check makes a second, racing compaction a no-op.
COMPACT_SQL = (
    "update public.chats set assistant_history = jsonb_build_array(%s::jsonb) || coalesce(("
    "   select jsonb_agg(e order by i) from jsonb_array_elements(assistant_history) with ordinality as t(e, i)"
    "   where i > %s), '[]'::jsonb),"
    " compaction_epoch = compaction_epoch + 1"
    " where user_id = %s and id = %s and compaction_epoch = %s"
)
SET_SUMMARY_SQL = (
    "update public.chats set summary_text = %s, summary_embedding = %s::extensions.halfvec, summary_model = %s,"
    " summary_turn_count = %s,"
    " title = case when %s::text is not null and not title_is_user then %s::text else title end,"
    " title_terms = case when %s::text is not null and not title_is_user then %s::text[] else title_terms end"
    " where user_id = %s and id = %s and summary_turn_count <= %s"
)
RENAME_SQL = "update public.chats set title = %s, title_is_user = true where user_id = %s and id = %s"
# The chat and its idempotency keys (which have no foreign key: see 34_chat_append.sql), in one statement.
DELETE_SQL = (
    "with gone as (delete from public.chats where user_id = %s and id = %s returning id),"
    " keys as (delete from memory_private.chat_append_keys k using gone where k.user_id = %s and k.chat_id = gone.id)"
    " select count(*) as deleted from gone"
)
SEARCH_SQL = (
    "select * from public.chat_search(%s, %s, %s::extensions.halfvec, %s, %s,"
    " p_half_life_days => %s::real, p_now => coalesce(%s::timestamptz, now()))"
)


def _vector(values: Sequence[float] | None) -> str | None:
    return None if values is None else "[" + ",".join(f"{v:.6g}" for v in values) + "]"


def _row(r: dict[str, Any]) -> ChatRow:
    embedding = r["summary_embedding"]
    return ChatRow(
        id=r["id"],
        user_id=r["user_id"],
        title=r["title"],
        title_is_user=r["title_is_user"],
        title_terms=tuple(r["title_terms"] or ()),
        full_history=r["full_history"],
        assistant_history=r["assistant_history"],
        summary_text=r["summary_text"],
        summary_embedding=tuple(float(x) for x in embedding.strip("[]").split(",")) if embedding else None,
        summary_model=r["summary_model"],
        turn_count=r["turn_count"],
        summary_turn_count=r["summary_turn_count"],
        compaction_epoch=r["compaction_epoch"],
        last_activity_at=r["last_activity_at"],
        created_at=r["created_at"],
    )


class PostgresChatStore:
    """Chats on a psycopg pool whose connections use `dict_row` and autocommit (as `PostgresStore.pool`)."""

    def __init__(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]) -> None:
        self._pool = pool

    async def _run(self, user_id: UUID, query: str, params: Sequence[Any]) -> tuple[list[dict[str, Any]], int]:
        with postgres_errors("the chat operation"):
            async with self._pool.connection() as conn:
                return await run_after_prelude(conn, IDENTITY_PRELUDE_SQL, (user_claims(user_id),), query, params)

    async def create(
        self, user_id: UUID, title: str | None, turns: Sequence[MessageJson], *, key: AppendKey | None = None
    ) -> ChatRow:
        """A new chat holding `turns` in both histories, once per `key` (see `ChatStore.create`)."""
        payload = json.dumps(list(turns), ensure_ascii=False)
        if key is None:
            rows, _ = await self._run(
                user_id, CREATE_SQL, (user_id, title, title is not None, payload, payload, len(turns))
            )
            return _row(rows[0])
        # No row only when the key's chat was deleted between the insert and the read: the key is free again.
        for _ in range(2):
            rows, _ = await self._run(user_id, CREATE_KEYED_SQL, (user_id, title, payload, key.key, key.request_hash))
            if rows:
                if rows[0]["outcome"] == "conflict":
                    raise IdempotencyKeyReusedError(REUSED_MESSAGE)
                return _row(rows[0])
        raise StoreError("creating the chat failed: its idempotency key's chat was deleted twice meanwhile; retry")

    async def get(self, user_id: UUID, chat_id: UUID) -> ChatRow | None:
        """The chat, or None."""
        rows, _ = await self._run(user_id, GET_SQL, (user_id, chat_id))
        return _row(rows[0]) if rows else None

    async def list_chats(self, user_id: UUID, *, limit: int, offset: int) -> tuple[list[ChatRow], int]:
        """A page of the user's chats, most recently active first, and their total."""
        rows, _ = await self._run(user_id, LIST_SQL, (user_id, limit, offset))
        if rows:
            return [_row(r) for r in rows], int(rows[0]["total"])
        counted, _ = await self._run(user_id, COUNT_SQL, (user_id,))
        return [], int(counted[0]["total"])

    async def append(
        self, user_id: UUID, chat_id: UUID, turns: Sequence[MessageJson], *, key: AppendKey | None = None
    ) -> ChatRow | None:
        """Append `turns` to both histories in one UPDATE, once per `key` (see `ChatStore.append`)."""
        payload = json.dumps(list(turns), ensure_ascii=False)
        params = (user_id, chat_id, payload, key.key if key else None, key.request_hash if key else None)
        rows, _ = await self._run(user_id, APPEND_SQL, params)
        if not rows:
            return None
        if rows[0]["outcome"] == "conflict":
            raise IdempotencyKeyReusedError(REUSED_MESSAGE)
        return _row(rows[0])

    async def compact(self, user_id: UUID, chat_id: UUID, *, epoch: int, drop: int, summary: MessageJson) -> bool:
        """Replace the first `drop` model-visible turns by `summary` if still at `epoch`."""
        params = (json.dumps(summary, ensure_ascii=False), drop, user_id, chat_id, epoch)
        _, count = await self._run(user_id, COMPACT_SQL, params)
        return count == 1

    async def set_summary(self, user_id: UUID, chat_id: UUID, update: SummaryUpdate) -> bool:
        """Store a summary unless one covering more turns is stored."""
        terms = list(update.title_terms)
        params = (
            update.text,
            _vector(update.embedding),
            update.model,
            update.turn_count,
            update.title,
            update.title,
            update.title,
            terms,
            user_id,
            chat_id,
            update.turn_count,
        )
        _, count = await self._run(user_id, SET_SUMMARY_SQL, params)
        return count == 1

    async def rename(self, user_id: UUID, chat_id: UUID, title: str) -> bool:
        """Set a user-chosen title."""
        _, count = await self._run(user_id, RENAME_SQL, (title, user_id, chat_id))
        return count == 1

    async def delete(self, user_id: UUID, chat_id: UUID) -> bool:
        """Delete the chat."""
        rows, _ = await self._run(user_id, DELETE_SQL, (user_id, chat_id, user_id))
        return bool(rows) and int(rows[0]["deleted"]) == 1

    async def search(self, user_id: UUID, search: ChatSearch) -> list[ChatHit]:
        """`public.chat_search` for this user."""
        params = (
            user_id,
            search.query,
            _vector(search.embedding),
            search.model,
            search.limit,
            search.half_life_days,
            search.now,
        )
        rows, _ = await self._run(user_id, SEARCH_SQL, params)
        return [
            ChatHit(
                r["id"],
                r["title"],
                r["summary_text"],
                r["last_activity_at"],
                r["turn_count"],
                float(r["score"]),
                float(r["semantic"]),
                float(r["text_match"]),
                float(r["recency"]),
            )
            for r in rows
        ]

    async def close(self) -> None:
        """The pool belongs to the caller."""
