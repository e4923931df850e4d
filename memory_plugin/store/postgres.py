"""`PostgresStore`: the long-term store on PostgreSQL (embedded, self-hosted or Supabase) via psycopg 3.

Every operation is one statement: writes call `public.memory_upsert_items` with the whole batch as one
JSON array; the context calls `public.memory_context`. The SQL lives in `supabase/migrations/`; the
statements below only call it.

Identity: each user-scoped statement runs in a transaction that first does what PostgREST does for a
request, `set_config('role', 'authenticated', true)` and `set_config('request.jwt.claims', {"sub": user},
true)`, so row-level security applies to the plugin's own queries too (a bug in Python cannot read or
write another user's rows). Prelude and statement travel as one message (one implicit transaction), so
the prelude costs no extra network round trip. Administrative work (migrations, erasing a user) goes
through `MemoryAdmin` instead.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.abc import Buffer
from psycopg.rows import dict_row
from psycopg.types.json import JsonbLoader
from psycopg_pool import AsyncConnectionPool

from ..database.calls import IDENTITY_PRELUDE_SQL, postgres_errors, run_after_prelude, user_claims
from ..database.pooler import PoolerMode, connection_kwargs
from ..database.reach import open_pool
from ..errors import StoreError
from ..quality.rules import WriteRules
from ..retrieval.scored import ScoredMemory
from ..retrieval.search import (
    BacklogItem,
    EmbeddingUpdate,
    SearchQuery,
    record_from_json_text,
    search_params,
)
from ..rows import MemoryItem, MemoryKind, MemoryRecord
from .base import DEFAULT_WRITE_RULES, ContextQuery, StoreBase

__all__ = ["PostgresStore"]

UPSERT_ITEMS_SQL = "select * from public.memory_upsert_items(%s, %s::jsonb, %s::real, %s::uuid, %s::real)"
# Items carrying embeddings: the same upsert, then their vectors, in one statement.
UPSERT_EMBEDDED_SQL = (
    "select * from public.memory_upsert_embedded(%s, %s::jsonb, %s::real, %s::uuid, %s::real, %s, %s::real)"
)
# The casts that resolve `memory_search`'s arguments (psycopg sends a Python float as float8, which does not
# match a `real` parameter by itself); every argument not listed here is `real`.
_SEARCH_CASTS = {
    "p_user_id": "uuid", "p_query": "text", "p_embedding": "extensions.vector", "p_model": "text",
    "p_limit": "integer", "p_candidates": "integer", "p_date_from": "timestamptz[]", "p_date_to": "timestamptz[]",
    "p_months": "integer[]", "p_asks_when": "boolean", "p_exact_scan_below": "integer",
    "p_text_scan_limit": "integer", "p_now": "timestamptz", "p_rerank_weights": "float8[]", "p_entities": "text[]",
    "p_rerank_pool": "integer",
}  # fmt: skip
# `memory_search`'s columns after `memory` (supabase/schemas/22_memory_search.sql).
_SEARCH_COLUMNS = (
    "score, text_score, vector_score, neighbour_score, trigram_score, speaker_score, date_score, time_score,"
    " importance_score, confidence_score, recency_score, session_score, adjacent_score, entity_score, hybrid_score,"
    " prev_memory_id"
)
SET_EMBEDDINGS_SQL = "select public.memory_set_embeddings(%s, %s, %s::jsonb) as stored"
EMBEDDING_BACKLOG_SQL = "select * from public.memory_embedding_backlog(%s, %s, %s)"
CONTEXT_SQL = (
    "select * from public.memory_context(%s, %s, %s, %s, %s::real, %s::real, %s::real, %s::real,"
    " coalesce(%s::timestamptz, now()), %s::jsonb, %s::real, %s)"
)
FACT_HISTORY_SQL = "select * from public.memory_fact_history(%s, %s::timestamptz, %s, %s)"
LIST_RECORDS_SQL = (
    "select * from public.user_memory where user_id = %s and (%s::text is null or kind = %s)"
    " order by created_at desc, id limit %s"
)
SEARCH_TEXT_SQL = (
    "select * from public.user_memory where user_id = %s and content ilike %s"
    " order by importance desc, confidence desc, last_reinforced_at desc limit %s"
)
DELETE_SQL = "delete from public.user_memory where user_id = %s and id = %s"
COUNT_FACTS_SQL = "select public.memory_fact_count(%s) as n"


class _JsonbLoader(JsonbLoader):
    """jsonb as Python values, the empty object and array (the `attributes` and `metadata` of most rows) made
    without the JSON parser: 0.16 µs instead of 1.8 µs each, 24 of them a context read of 12 facts."""

    def load(self, data: Buffer) -> Any:
        if data == b"{}":
            return {}
        if data == b"[]":
            return []
        return super().load(data)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    conn.adapters.register_loader("jsonb", _JsonbLoader)


def _like_pattern(text: str) -> str:
    escaped = text.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class PostgresStore(StoreBase):
    """A `LongTermStore` on a psycopg async connection pool.

    Create with `await PostgresStore.connect(url)`; close with `await store.close()`.

    Args:
        pool: The connection pool. In production its role is a login role granted `authenticated` (see
            `supabase/roles/memory_plugin_app.sql`), never a superuser.
        act_as_user: Run every user-scoped statement as `authenticated` with the user's JWT claims, so
            RLS applies (the default). False runs them as the pool's role: only for benchmarks measuring
            the cost of the prelude, or trusted maintenance code.
    """

    def __init__(
        self, pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]], *, act_as_user: bool = True
    ) -> None:
        self._pool = pool
        self.act_as_user = act_as_user

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
        pooler: PoolerMode = "auto",
    ) -> PostgresStore:
        """Open a pool on `url` and check that the database answers (`pooler`: see `database.pooler`)."""
        pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            timeout=connect_timeout,
            open=False,
            configure=_configure,
            # autocommit: every operation is a single statement, so no BEGIN/COMMIT round trips.
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": max(1, round(connect_timeout)),
                **connection_kwargs(url, pooler),
            },
            name="memory_plugin",
        )
        await open_pool(pool, url, seconds=connect_timeout, what="")
        return cls(pool)

    @property
    def backend_name(self) -> str:
        """Always "postgres"."""
        return "postgres"

    @property
    def pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]:
        """The connection pool (for migrations and admin tasks)."""
        return self._pool

    async def _run(self, user_id: UUID | None, query: str, params: Sequence[Any]) -> tuple[list[dict[str, Any]], int]:
        """Run one statement and return its rows and row count.

        With a `user_id` (and `act_as_user`), the statement runs as that user under RLS: prelude and
        statement in one transaction and one round trip. Without, it runs as the pool's role.
        """
        with postgres_errors("the operation"):
            async with self._pool.connection() as conn:
                if user_id is None or not self.act_as_user:
                    cursor = await conn.execute(query, params)
                    return (await cursor.fetchall() if cursor.description else []), cursor.rowcount
                return await run_after_prelude(conn, IDENTITY_PRELUDE_SQL, (user_claims(user_id),), query, params)

    async def _fetch(self, user_id: UUID, query: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        rows, _ = await self._run(user_id, query, params)
        return rows

    async def upsert(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        rules: WriteRules = DEFAULT_WRITE_RULES,
        *,
        write_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        """All items in one statement (one round trip), whatever their number.

        With `write_id`, the database applies the write at most once: a repeat returns the items' current
        rows and changes nothing (see `memory_upsert_items` in the migrations).
        """
        if not items:
            return []
        payload = json.dumps([item.as_json() for item in items], ensure_ascii=False)
        model = next((i.embedding_model for i in items if i.embedding is not None), None)
        params = (user_id, payload, rules.reinforcement_step, write_id, rules.near_duplicate_threshold)
        if model is None:
            rows = await self._fetch(user_id, UPSERT_ITEMS_SQL, params)
        else:
            rows = await self._fetch(user_id, UPSERT_EMBEDDED_SQL, (*params, model, rules.embedding_threshold))
        return [MemoryRecord.from_row(r) for r in rows]

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """One call to `public.memory_context`."""
        w = query.weights
        rows = await self._fetch(
            user_id,
            CONTEXT_SQL,
            (
                user_id,
                query.max_facts,
                query.max_projects,
                query.max_patterns,
                w.importance,
                w.confidence,
                w.recency,
                w.recency_window_days,
                query.now,
                json.dumps(query.decay.as_json()),
                query.decay.floor,
                query.max_rejections,
            ),
        )
        return [MemoryRecord.from_row(r) for r in rows]

    async def fact_history(
        self, user_id: UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemoryRecord]:
        """One call to `public.memory_fact_history`."""
        rows = await self._fetch(user_id, FACT_HISTORY_SQL, (user_id, at, include_invalid, limit))
        return [MemoryRecord.from_row(r) for r in rows]

    async def list_records(
        self, user_id: UUID, *, kind: MemoryKind | None = None, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The user's rows, newest first."""
        rows = await self._fetch(user_id, LIST_RECORDS_SQL, (user_id, kind, kind, limit))
        return [MemoryRecord.from_row(r) for r in rows]

    async def search_text(self, user_id: UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """Rows whose content contains `text` (ilike)."""
        rows = await self._fetch(user_id, SEARCH_TEXT_SQL, (user_id, _like_pattern(text), limit))
        return [MemoryRecord.from_row(r) for r in rows]

    async def search(self, user_id: UUID, query: SearchQuery) -> list[ScoredMemory]:
        """One call to `public.memory_search` (hybrid ranking, see the migration), with the same named
        arguments the Supabase store sends (`search_params`)."""
        params = search_params(user_id, query)
        rows = await self._fetch(user_id, _search_sql(tuple(params)), tuple(params.values()))
        return [ScoredMemory.from_search_row(r, record_from_json_text(r["memory"])) for r in rows]

    async def set_embeddings(self, user_id: UUID, model: str, items: Sequence[EmbeddingUpdate]) -> int:
        """All vectors in one `public.memory_set_embeddings` call."""
        if not items:
            return 0
        payload = json.dumps(
            [{"content_hash": i.content_hash, "content": i.content, "embedding": list(i.embedding)} for i in items],
            ensure_ascii=False,
        )
        rows = await self._fetch(user_id, SET_EMBEDDINGS_SQL, (user_id, model, payload))
        return int(rows[0]["stored"]) if rows else 0

    async def embedding_backlog(self, user_id: UUID, model: str, *, limit: int = 1000) -> list[BacklogItem]:
        """`public.memory_embedding_backlog`."""
        rows = await self._fetch(user_id, EMBEDDING_BACKLOG_SQL, (user_id, model, limit))
        return [BacklogItem(r["memory_id"], r["content_hash"], r["content"]) for r in rows]

    async def count_facts(self, user_id: UUID) -> int:
        """One `memory_fact_count` call."""
        rows = await self._fetch(user_id, COUNT_FACTS_SQL, (user_id,))
        return int(rows[0]["n"])

    async def delete(self, user_id: UUID, record_id: UUID) -> bool:
        """Delete one of the user's rows."""
        _, count = await self._run(user_id, DELETE_SQL, (user_id, record_id))
        return count > 0

    async def ping(self) -> bool:
        """`select 1`, False on any connection error."""
        try:
            await self._run(None, "select 1 as ok", ())
        except StoreError:
            return False
        return True

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()


@functools.cache
def _search_sql(names: tuple[str, ...]) -> str:
    """`memory_search` called with `names` as named arguments (positional placeholders: the RLS prelude
    shares the message)."""
    args = ", ".join(f"{name} => %s::{_SEARCH_CASTS.get(name, 'real')}" for name in names)
    # The row's jsonb as text, parsed by pydantic in one pass rather than by json.loads then validated.
    return f"select memory::text as memory, {_SEARCH_COLUMNS} from public.memory_search({args})"
