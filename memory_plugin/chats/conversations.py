"""`PostgresConversationStore`: pydantic-ai's `ConversationStore` on Postgres / Supabase, one user's conversations
under row-level security.

pydantic-ai's base class holds the policy (which messages are new, where a rewritten history branches, what a
fork shares, revision checks); a backend supplies five primitives, which this one implements on
`public.conversations` (one record per conversation) and `public.conversation_entries` (one message per entry,
each pointing at the entry before it). A store instance is bound to one user: every statement runs as that user
(role `authenticated` with the user's JWT claims, transaction-local), so the database answers "no such
conversation" for anyone else's, whatever the caller passes.

Writes of one user's conversations (`write_record`, `delete_record`) are serialised by a transaction-level
advisory lock on the user: a fork pointing into another conversation's entries and a delete releasing them
cannot interleave, so a record never points at a released entry. Reads take no lock; a history read racing a
delete raises `LookupError`, which the base class turns into "re-read the record".

`delete` deletes the conversation's record and, in the same transaction, every entry of the user that no
remaining record (its head or a branch it left) reaches: a conversation's messages are erased with it unless
a fork still shares them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import ConfigDict, TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RunUsage
from pydantic_core import PydanticSerializationError

from ..database.calls import postgres_errors, run_as_user
from ..errors import InvalidMemoryInputError
from ..logs import LOG_PREFIX, logger

__all__ = ["PostgresConversationStore"]

# Bytes inside messages (files, a tool's raw return) travel as base64, as in `ModelMessagesTypeAdapter`.
_JSON_CONFIG = ConfigDict(defer_build=True, ser_json_bytes="base64", val_json_bytes="base64")
_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage, config=_JSON_CONFIG)
_USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
_DEFERRED: TypeAdapter[DeferredToolRequests] = TypeAdapter(DeferredToolRequests)

MAX_CONVERSATION_ID_CHARS = 500
"""Longest conversation id (and scope) the table accepts."""
MAX_ENTRY_ID_CHARS = 200
"""Longest entry id the table accepts (pydantic-ai mints 36-character UUIDs)."""

_RECORD_COLUMNS = (
    "conversation_id, head_id, usage::text as usage, deferred_tool_requests::text as deferred_tool_requests,"
    " scope, forked_from, forked_at, branches, revision, updated_at, format_version"
)
READ_RECORD_SQL = (
    f"select {_RECORD_COLUMNS} from public.conversations where user_id = %(user)s and conversation_id = %(cid)s"
)
READ_RECORDS_SQL = (
    f"select {_RECORD_COLUMNS} from public.conversations"
    " where user_id = %(user)s and (%(scope)s::text is null or scope = %(scope)s)"
    " order by updated_at desc, conversation_id limit %(limit)s"
)
_ENTRY_COLUMNS = "id, parent_id, kind, message::text as message"
READ_ENTRY_SQL = f"select {_ENTRY_COLUMNS} from public.conversation_entries where user_id = %(user)s and id = %(id)s"
# From the head back along `parent_id`, newest first, at most `limit` entries (all with a null limit).
READ_HISTORY_SQL = f"""
with recursive chain (id, parent_id, kind, message, depth) as (
    select e.id, e.parent_id, e.kind, e.message, 1
      from public.conversation_entries e where e.user_id = %(user)s and e.id = %(head)s
    union all
    -- One primary-key lookup per step: `limit 1` keeps the planner from flattening the lateral into a join,
    -- which it may plan as a scan of all the user's entries per step (measured on a table not yet analysed:
    -- 268 ms for a 1,000-message history that way).
    select e.id, e.parent_id, e.kind, e.message, c.depth + 1
      from chain c cross join lateral (
          select x.id, x.parent_id, x.kind, x.message from public.conversation_entries x
           where x.user_id = %(user)s and x.id = c.parent_id limit 1
      ) e
     where (%(limit)s::integer is null or c.depth < %(limit)s::integer)
       -- Entries are rows the user may write directly, so parents may loop (loop-1 -> loop-2 -> loop-1): a valid
       -- chain is at most as long as the user's entries (their count, kept by the database's bounds), so the
       -- walk stops there; read_history cuts a loop at its first repeated entry.
       and c.depth <= coalesce((select u.n from memory_private.memory_usage u
                                 where u.user_id = %(user)s and u.counted = 'conversation_entries_per_user'),
                               200000)
)
select {_ENTRY_COLUMNS} from chain order by depth desc
"""
LOCK_SQL = "select pg_advisory_xact_lock(hashtextextended(%(lock)s, 7443))"
# One statement after the lock: the record must still have `expected` as its revision (or not exist when it is
# null) and the new head must exist (stored, or among the new entries); only then are the entries inserted and
# the record written. The answer says whether it was.
WRITE_SQL = """
with ok as (
    select true as ok
     where (select c.revision from public.conversations c
             where c.user_id = %(user)s and c.conversation_id = %(cid)s) is not distinct from %(expected)s::text
       and (%(head)s::text is null
            or %(head)s::text = any(%(new_ids)s::text[])
            or exists (select from public.conversation_entries e where e.user_id = %(user)s and e.id = %(head)s))
), entries as (
    insert into public.conversation_entries (user_id, id, parent_id, kind, message)
    select %(user)s, n.id, n.parent_id, n.kind, n.message
      from jsonb_to_recordset(%(entries)s::jsonb) as n (id text, parent_id text, kind text, message jsonb)
     where exists (select from ok)
), record as (
    insert into public.conversations (user_id, conversation_id, head_id, usage, deferred_tool_requests, scope,
                                      forked_from, forked_at, branches, revision, updated_at, format_version)
    select %(user)s, %(cid)s, %(head)s, %(usage)s::jsonb, %(deferred)s::jsonb, %(scope)s, %(forked_from)s,
           %(forked_at)s, %(branches)s::text[], %(revision)s, %(updated_at)s, %(format_version)s
     where exists (select from ok)
    on conflict (user_id, conversation_id) do update
       set head_id = excluded.head_id, usage = excluded.usage,
           deferred_tool_requests = excluded.deferred_tool_requests, scope = excluded.scope,
           forked_from = excluded.forked_from, forked_at = excluded.forked_at, branches = excluded.branches,
           revision = excluded.revision, updated_at = excluded.updated_at, format_version = excluded.format_version
)
select exists (select from ok) as ok
"""
# Delete the record (only at `expected`), then every entry of the user no remaining record reaches from its
# head or a branch tip. A statement of its own after the delete, so it sees the record gone.
DELETE_RECORD_SQL = (
    "delete from public.conversations"
    " where user_id = %(user)s and conversation_id = %(cid)s and revision = %(expected)s"
)
RELEASE_ENTRIES_SQL = """
with recursive tips (id) as (
    select t.id from public.conversations c, unnest(array_append(c.branches, c.head_id)) as t (id)
     where c.user_id = %(user)s and t.id is not null
), reachable (id, parent_id) as (
    select e.id, e.parent_id from public.conversation_entries e join tips on e.user_id = %(user)s and e.id = tips.id
    union
    -- One primary-key lookup per step, as in READ_HISTORY_SQL.
    select e.id, e.parent_id
      from reachable r cross join lateral (
          select x.id, x.parent_id from public.conversation_entries x
           where x.user_id = %(user)s and x.id = r.parent_id limit 1
      ) e
)
delete from public.conversation_entries e
 where e.user_id = %(user)s and not exists (select from reachable r where r.id = e.id)
"""

Pool = AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]


def _checked_id(value: str | None, what: str, limit: int, *, minimum: int = 1) -> None:
    if value is not None and not minimum <= len(value) <= limit:
        raise InvalidMemoryInputError(f"a {what} must have {minimum} to {limit} characters (got {len(value)})")


def _entries_json(entries: Sequence[ConversationEntry]) -> str:
    """The new entries as one JSON array (each message in pydantic-ai's message JSON)."""
    items: list[str] = []
    for entry in entries:
        _checked_id(entry.id, "conversation entry id", MAX_ENTRY_ID_CHARS)
        try:
            message = _MESSAGE.dump_json(entry.message).decode()
        except PydanticSerializationError as exc:
            raise InvalidMemoryInputError(f"a message of the conversation cannot be stored as JSON: {exc}") from exc
        head = json.dumps({"id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind})
        items.append(f'{head[:-1]}, "message": {message}}}')
    return "[" + ",".join(items) + "]"


def _record(row: dict[str, Any]) -> ConversationRecord:
    deferred = row["deferred_tool_requests"]
    return ConversationRecord(
        conversation_id=row["conversation_id"],
        head_id=row["head_id"],
        usage=_USAGE.validate_json(row["usage"]),
        deferred_tool_requests=_DEFERRED.validate_json(deferred) if deferred is not None else None,
        scope=row["scope"],
        forked_from=row["forked_from"],
        forked_at=row["forked_at"],
        branches=list(row["branches"]),
        revision=row["revision"],
        updated_at=row["updated_at"],
        format_version=row["format_version"],
    )


def _entry(row: dict[str, Any]) -> ConversationEntry:
    return ConversationEntry(
        id=row["id"], parent_id=row["parent_id"], message=_MESSAGE.validate_json(row["message"]), kind=row["kind"]
    )


class PostgresConversationStore(ConversationStore):
    """pydantic-ai's `ConversationStore` on `public.conversations` / `public.conversation_entries`, as `user_id`
    under RLS.

    `pool`: a psycopg pool whose connections use `dict_row` and autocommit (as `PostgresStore.pool`), on a role
    that may become `authenticated` (on Supabase the pooler's `postgres` or the plugin's `memory_plugin_app`).
    Make one store per user, e.g. per request from the authenticated user's id; they are cheap (no
    connection of their own). `scope` stays what pydantic-ai makes of it, a label within the user's
    conversations (a channel, a project); tenant isolation does not depend on it.
    """

    def __init__(self, pool: Pool, user_id: UUID) -> None:
        self._pool = pool
        self.user_id = user_id
        """The user whose conversations this store reads and writes."""

    async def _run(self, statements: Sequence[str], params: dict[str, Any]) -> list[tuple[list[dict[str, Any]], int]]:
        """`statements` after the identity prelude, in one message (one implicit transaction): each statement's
        rows and row count."""
        with postgres_errors("the conversation store operation"):
            async with self._pool.connection() as conn:
                try:
                    return await run_as_user(conn, self.user_id, statements, params)
                except psycopg.errors.UntranslatableCharacter as exc:
                    raise InvalidMemoryInputError(
                        "a message holds a NUL character (\\u0000), which Postgres cannot store in JSON: remove it"
                        " from the message (nothing of this save was stored)"
                    ) from exc

    def _params(self, **params: Any) -> dict[str, Any]:
        return {"user": self.user_id, **params}

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record of one of the user's conversations, or None."""
        [(rows, _)] = await self._run([READ_RECORD_SQL], self._params(cid=conversation_id))
        return _record(rows[0]) if rows else None

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        """The user's records (with `scope`, if given), most recently saved first, at most `limit`."""
        [(rows, _)] = await self._run([READ_RECORDS_SQL], self._params(scope=scope, limit=limit))
        return [_record(r) for r in rows]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Store the record and its new entries in one transaction, if the stored revision is still
        `expected_revision` (None: not stored yet) and the head exists; otherwise `ConversationConflict`."""
        _checked_id(record.conversation_id, "conversation id", MAX_CONVERSATION_ID_CHARS)
        _checked_id(record.scope, "conversation scope", MAX_CONVERSATION_ID_CHARS, minimum=0)
        params = self._params(
            lock=f"conversations:{self.user_id}",
            cid=record.conversation_id,
            expected=expected_revision,
            head=record.head_id,
            new_ids=[entry.id for entry in new_entries],
            entries=_entries_json(new_entries),
            usage=_USAGE.dump_json(record.usage).decode(),
            deferred=(
                _DEFERRED.dump_json(record.deferred_tool_requests).decode()
                if record.deferred_tool_requests is not None
                else None
            ),
            scope=record.scope,
            forked_from=record.forked_from,
            forked_at=record.forked_at,
            branches=list(record.branches),
            revision=record.revision,
            updated_at=record.updated_at,
            format_version=record.format_version,
        )
        _, (rows, _) = await self._run([LOCK_SQL, WRITE_SQL], params)
        if not rows[0]["ok"]:
            raise ConversationConflict(record.conversation_id)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record at `expected_revision` (else `ConversationConflict`) and release the entries no
        remaining record of the user reaches, in one transaction."""
        params = self._params(lock=f"conversations:{self.user_id}", cid=conversation_id, expected=expected_revision)
        _, (_, deleted), _ = await self._run([LOCK_SQL, DELETE_RECORD_SQL, RELEASE_ENTRIES_SQL], params)
        if deleted == 0:  # nothing released either: every entry was reachable before and still is
            raise ConversationConflict(conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """One of the user's entries; `LookupError` (`KeyError`) when there is none."""
        [(rows, _)] = await self._run([READ_ENTRY_SQL], self._params(id=entry_id))
        if not rows:
            raise KeyError(entry_id)
        return _entry(rows[0])

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries from the first up to `head_id` (the last `limit` of them), in one query; `LookupError`
        (`KeyError`) when the chain is broken (a concurrent delete released it)."""
        if head_id is None or limit == 0:
            return []
        [(rows, _)] = await self._run([READ_HISTORY_SQL], self._params(head=head_id, limit=limit))
        entries = [_entry(r) for r in rows]
        if not entries:
            raise KeyError(head_id)
        seen: set[str] = set()
        for position in range(len(entries) - 1, -1, -1):  # from the head back
            if entries[position].id in seen:
                logger.warning(
                    "%s conversation entries of user %s loop at %r: the history is cut there",
                    LOG_PREFIX, self.user_id, entries[position].id,
                )  # fmt: skip
                return entries[position + 1 :]
            seen.add(entries[position].id)
        if entries[0].parent_id is not None and (limit is None or len(entries) < limit):
            raise KeyError(entries[0].parent_id)
        return entries
