"""Context receipts kept per user in Postgres (`memory_private.memory_receipts`), so any process — `memory-plugin
serve`, its dashboard — can show what the agent was given on a past turn: the stored form (`receipt_document`,
`receipt_from_document`) and the statements (`add_receipt`, `read_receipts`), every one as the user under
row-level security (the owner writes and reads their own rows only; the table's trigger keeps the newest
`RECEIPTS_KEPT`).

Facts are stored by id, category, reason, tokens and score parts, never by text: the text is read from the
user's facts when the receipt is shown, so a deleted fact leaves no copy of its words in the receipts (it shows
as deleted). The document is read defensively: the row is the user's own and writable by them directly.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast
from uuid import UUID

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from ..crypto import KeyRing, is_sealed, open_text
from ..database.calls import IDENTITY_PRELUDE_SQL, postgres_errors, run_as_user, user_claims
from ..errors import EncryptionKeyError, MemoryPluginError
from ..logs import LOG_PREFIX, logger
from .budget import ContextReport
from .receipt import ContextReceipt, FactReason, ReceiptFact

__all__ = [
    "RECEIPTS_KEPT",
    "KeyRing",
    "PostgresReceipts",
    "RamReceipts",
    "ReceiptKeeper",
    "StoredReceipt",
    "add_receipt",
    "fact_ids",
    "read_receipts",
    "receipt_document",
    "receipt_from_document",
]

RECEIPTS_KEPT = 100
"""Receipts kept per user, the newest (the table's trigger, supabase/schemas/50_memory_receipts.sql): ~1 kB
each, 100 kB a user; enough to look back over a few days of conversation."""

_LISTS = ("injected", "in_slots", "cut")
_REASONS: frozenset[str] = frozenset({"search", "ranked", "rejection", "slots"})
_REPORT_FIELDS = {f.name: f.type for f in dataclasses.fields(ContextReport)}


@dataclass(frozen=True, slots=True)
class StoredReceipt:
    """A receipt read back from the database: its row id (newest first when listed) and the receipt."""

    id: int
    receipt: ContextReceipt


def _fact_document(fact: ReceiptFact) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": str(fact.id),
        "category": fact.category,
        "reason": fact.reason,
        "tokens": fact.tokens,
    }
    if fact.score is not None:
        document["score"] = fact.score
    if fact.components:
        document["components"] = dict(fact.components)
    return document


def receipt_document(receipt: ContextReceipt) -> dict[str, Any]:
    """The JSON document stored for `receipt` (without fact texts; session, user and time are columns)."""
    return {
        "report": dataclasses.asdict(receipt.report),
        **{name: [_fact_document(f) for f in getattr(receipt, name)] for name in _LISTS},
        "standing_tokens": receipt.standing_tokens,
        "turn_tokens": receipt.turn_tokens,
        "messages_kept": receipt.messages_kept,
        "messages_dropped": receipt.messages_dropped,
        "summary_cut": receipt.summary_cut,
    }


def _uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


def _list(document: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    value = document.get(name)
    return [f for f in value if isinstance(f, Mapping)] if isinstance(value, list) else []


def fact_ids(document: Mapping[str, Any]) -> set[UUID]:
    """The ids of the facts a stored receipt names (to read their texts)."""
    ids = (_uuid(f.get("id")) for name in _LISTS for f in _list(document, name))
    return {i for i in ids if i is not None}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _fact(document: Mapping[str, Any], texts: Mapping[UUID, str]) -> ReceiptFact | None:
    fact_id = _uuid(document.get("id"))
    if fact_id is None:
        return None
    reason = document.get("reason")
    score = document.get("score")
    components = document.get("components")
    return ReceiptFact(
        id=fact_id,
        content=texts.get(fact_id, ""),
        category=str(document.get("category", "")),
        reason=cast("FactReason", reason if reason in _REASONS else "ranked"),
        tokens=_int(document.get("tokens")),
        score=float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None,
        components={
            str(k): float(v)
            for k, v in (components.items() if isinstance(components, Mapping) else ())
            if isinstance(v, int | float) and not isinstance(v, bool)
        },
    )


def _report(value: Any) -> ContextReport:
    given = value if isinstance(value, Mapping) else {}
    fields: dict[str, Any] = {"budget": _int(given.get("budget")), "counter": str(given.get("counter", ""))}
    for name, kind in _REPORT_FIELDS.items():
        if name in fields or name not in given:
            continue
        fields[name] = bool(given[name]) if kind in (bool, "bool") else _int(given[name])
    return ContextReport(**fields)


def receipt_from_document(
    session_id: str, user_id: UUID, at: datetime, document: Any, texts: Mapping[UUID, str]
) -> ContextReceipt:
    """The receipt of a stored row; `texts`: the current text of each fact it names (a fact missing there was
    deleted: its content is ""). Unreadable parts of the document read as empty."""
    given: Mapping[str, Any] = document if isinstance(document, Mapping) else {}

    def facts(name: str) -> tuple[ReceiptFact, ...]:
        return tuple(f for f in (_fact(d, texts) for d in _list(given, name)) if f is not None)

    return ContextReceipt(
        session_id=session_id,
        user_id=user_id,
        at=at,
        report=_report(given.get("report")),
        injected=facts("injected"),
        in_slots=facts("in_slots"),
        cut=facts("cut"),
        standing_tokens=_int(given.get("standing_tokens")),
        turn_tokens=_int(given.get("turn_tokens")),
        messages_kept=_int(given.get("messages_kept")),
        messages_dropped=_int(given.get("messages_dropped")),
        summary_cut=bool(given.get("summary_cut", False)),
    )


_ADD_SQL = """
insert into memory_private.memory_receipts (user_id, session_id, created_at, receipt)
values (%(user)s, %(session)s, %(at)s, %(receipt)s::jsonb)
"""
_READ_SQL = """
select id, session_id, created_at, receipt from memory_private.memory_receipts
 where user_id = %(user)s and (%(id)s::bigint is null or id = %(id)s)
 order by id desc limit %(limit)s
"""
_TEXTS_SQL = (
    "select id, content, kind, category from public.user_memory where user_id = %(user)s and id = any(%(ids)s::uuid[])"
)


def _shown_text(ring: KeyRing | None, user_id: UUID, content: str, kind: str, category: str) -> str:
    """A fact's text as a receipt shows it: a sealed one opened with `ring`, or "" when it does not open (never
    its ciphertext)."""
    if not is_sealed(content):
        return content
    try:
        return open_text(ring, content, user_id=user_id, kind=kind, category=category)
    except EncryptionKeyError:
        return ""


async def add_receipt(pool: AsyncConnectionPool[Any], user_id: UUID, receipt: ContextReceipt) -> None:
    """Store `receipt` as one of `user_id`'s (older ones beyond the newest kept go, by the table's trigger).
    Never raises: it runs after the turn, whose answer exists already; a failure is logged."""
    params = {
        "user": user_id,
        "session": receipt.session_id[:500],
        "at": receipt.at,
        "receipt": json.dumps(receipt_document(receipt)),
    }
    try:
        with postgres_errors("storing the context receipt"):
            async with pool.connection() as conn:
                # One message after the identity prelude: one round trip a turn, where four were.
                await run_as_user(conn, user_id, [_ADD_SQL], params)
    except MemoryPluginError as exc:
        logger.warning("%s could not store the turn's context receipt: %s", LOG_PREFIX, exc)


async def read_receipts(
    pool: AsyncConnectionPool[Any],
    user_id: UUID,
    *,
    limit: int = 20,
    receipt_id: int | None = None,
    ring: KeyRing | None = None,
) -> list[StoredReceipt]:
    """The user's newest `limit` receipts, newest first (`receipt_id`: that one only, [] when it is not theirs),
    with the current text of each fact they name ("" for a fact deleted since, or sealed and not opened by
    `ring`, the encryption keys)."""
    with postgres_errors("reading the context receipts"):
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(IDENTITY_PRELUDE_SQL, (user_claims(user_id),))
            cursor = conn.cursor(row_factory=tuple_row)
            await cursor.execute(_READ_SQL, {"user": user_id, "id": receipt_id, "limit": max(0, limit)})
            rows = await cursor.fetchall()
            ids = sorted({i for row in rows if isinstance(row[3], dict) for i in fact_ids(row[3])})
            texts: dict[UUID, str] = {}
            if ids:
                await cursor.execute(_TEXTS_SQL, {"user": user_id, "ids": ids})
                texts = {
                    UUID(str(r[0])): _shown_text(ring, user_id, str(r[1]), str(r[2]), str(r[3]))
                    for r in await cursor.fetchall()
                }
    return [StoredReceipt(int(r[0]), receipt_from_document(str(r[1]), user_id, r[2], r[3], texts)) for r in rows]


class ReceiptKeeper(Protocol):
    """Where a context store keeps receipts (part of `ContextStore`)."""

    async def add_receipt(self, user_id: UUID, receipt: ContextReceipt) -> None:
        """Keep `receipt` among the user's newest `RECEIPTS_KEPT`; never raises (a failure is logged: the turn it
        describes is over)."""
        ...

    async def receipts(self, user_id: UUID, *, limit: int = 20, receipt_id: int | None = None) -> list[StoredReceipt]:
        """The user's newest receipts, newest first (`receipt_id`: that one only)."""
        ...


class RamReceipts:
    """`ReceiptKeeper` in this process's memory (with the facts' texts): `InMemoryContextStore`'s."""

    _kept_receipts: dict[UUID, list[StoredReceipt]] | None = None

    async def add_receipt(self, user_id: UUID, receipt: ContextReceipt) -> None:
        """The newest `RECEIPTS_KEPT` per user."""
        if self._kept_receipts is None:
            self._kept_receipts = {}
        kept = self._kept_receipts.setdefault(user_id, [])
        kept.append(StoredReceipt(kept[-1].id + 1 if kept else 1, receipt))
        del kept[:-RECEIPTS_KEPT]

    async def receipts(self, user_id: UUID, *, limit: int = 20, receipt_id: int | None = None) -> list[StoredReceipt]:
        """Newest first."""
        kept = reversed((self._kept_receipts or {}).get(user_id, []))
        return [r for r in kept if receipt_id is None or r.id == receipt_id][: max(0, limit)]


class PostgresReceipts:
    """`ReceiptKeeper` on the pool of `PostgresContextStore` (table `memory_receipts`, as the user)."""

    _pool: AsyncConnectionPool[Any]
    _ring: KeyRing | None = None
    """The encryption keys sealed fact texts are opened with (None: shown as "")."""

    async def add_receipt(self, user_id: UUID, receipt: ContextReceipt) -> None:
        """Stored as the user; never raises."""
        await add_receipt(self._pool, user_id, receipt)

    async def receipts(self, user_id: UUID, *, limit: int = 20, receipt_id: int | None = None) -> list[StoredReceipt]:
        """Read as the user, with the current texts of the facts named."""
        return await read_receipts(self._pool, user_id, limit=limit, receipt_id=receipt_id, ring=self._ring)
