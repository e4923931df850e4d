"""`rotate_keys`: re-seal every user's sealed rows under the active key, and seal the plain rows of the
sensitive categories, as the administrative role (`memory-plugin rotate-key`).

Batched by row id (keyset: a run resumes where an interrupted one stopped, because done rows no longer match),
each batch one short statement that changes a row only if its content is still the one read (compare-and-set):
a row the application rewrote meanwhile is left for the next run, never overwritten with stale text. Running it
again finds nothing to do (idempotent). A row sealed under a key the ring does not hold is counted and left as
it is: add that key, run again, and only then remove it.

What changes in a row: its content (sealed anew, fresh nonce), its content hash (keyed with the ring's hash key,
the same for a row already sealed), and, for a plain row being sealed, its near-duplicate keys and slot (derived
from the plain text) are cleared; the search-row trigger drops its search row. `updated_at` moves (the table's
touch trigger).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import tuple_row

from ..crypto import KeyRing, is_sealed, open_text, seal_text, sealed_hash
from ..errors import EncryptionKeyError, StoreError, StoreUnavailableError
from ..logs import LOG_PREFIX, logger

__all__ = ["RotationReport", "rotate_keys"]

# The next rows after %(after)s not sealed under the active key: sealed under another, or (when sealing plain
# rows) plain facts of a sensitive category. Superseded and archived rows too: history is stored text as well.
NEXT_BATCH_SQL = """
select id, user_id, kind, category, content, content_hash
  from public.user_memory
 where id > %(after)s
   and ((key_id is not null and key_id <> %(active)s)
        or (%(seal_plain)s and key_id is null and kind = 'fact' and category = any(%(categories)s)))
 order by id
 limit %(limit)s
"""
# Compare-and-set on the content read; a hash already taken by another row of the user (the same fact stored
# plain before keys were configured and sealed after) keeps the row apart with its id as suffix.
RESEAL_SQL = """
update public.user_memory m
   set content      = v.content,
       content_hash = case when exists (select 1 from public.user_memory o
                                         where o.user_id = m.user_id and o.content_hash = v.content_hash
                                           and o.id <> m.id)
                           then v.content_hash || ':' || m.id::text else v.content_hash end,
       slot = null, match_key = null, match_guard = null, match_words = null
  from jsonb_to_recordset(%s::jsonb) as v(id uuid, old text, content text, content_hash text, was_sealed boolean)
 where m.id = v.id and m.content = v.old
returning v.was_sealed
"""
REMAINING_SQL = """
select coalesce(key_id, '(plain)'), count(*) from public.user_memory
 where (key_id is not null and key_id <> %(active)s)
    or (%(seal_plain)s and key_id is null and kind = 'fact' and category = any(%(categories)s))
 group by 1 order by 1
"""
_NIL = UUID(int=0)


@dataclass
class RotationReport:
    """What one `rotate_keys` run did."""

    resealed: int = 0
    """Rows sealed under an older key, now sealed under the active one."""
    sealed: int = 0
    """Plain rows of a sensitive category, now sealed."""
    unreadable: int = 0
    """Rows left as they were: sealed under a key the ring does not hold, or not opening with it."""
    skipped: int = 0
    """Rows changed by the application while this batch ran (left for the next run)."""
    remaining: dict[str, int] = field(default_factory=dict)
    """After the run: rows still not under the active key, by key id (`(plain)`: plain rows to seal)."""

    def describe(self) -> str:
        """One line for the command line."""
        left = ", ".join(f"{k}: {n}" for k, n in self.remaining.items()) or "none"
        return (
            f"re-sealed {self.resealed} row(s) under the active key, sealed {self.sealed} plain row(s),"
            f" {self.unreadable} unreadable, {self.skipped} changed meanwhile; not under the active key: {left}"
        )


async def rotate_keys(
    conn: psycopg.AsyncConnection[Any],
    ring: KeyRing,
    categories: Collection[str],
    *,
    seal_plain: bool = True,
    batch_size: int = 500,
) -> RotationReport:
    """Re-seal every row not under `ring.active` (and seal plain facts of `categories` when `seal_plain`), in
    batches of `batch_size` on `conn` (an administrative connection in autocommit: it sees every user)."""
    report = RotationReport()
    params: dict[str, Any] = {
        "active": ring.active,
        "seal_plain": seal_plain,
        "categories": list(categories),
        "limit": batch_size,
        "after": _NIL,
    }
    cursor = conn.cursor(row_factory=tuple_row)
    try:
        while True:
            await cursor.execute(NEXT_BATCH_SQL, params)
            rows = await cursor.fetchall()
            if not rows:
                break
            params["after"] = rows[-1][0]
            changes = []
            for row_id, user_id, kind, category, content, content_hash in rows:
                was_sealed = is_sealed(content)
                try:
                    plain = open_text(ring, content, user_id=user_id, kind=kind, category=category)
                except EncryptionKeyError:
                    report.unreadable += 1
                    continue
                changes.append(
                    {
                        "id": str(row_id),
                        "old": content,
                        "content": seal_text(ring, plain, user_id=user_id, kind=kind, category=category),
                        "content_hash": sealed_hash(ring, user_id, content_hash),
                        "was_sealed": was_sealed,
                    }
                )
            if changes:
                await cursor.execute(RESEAL_SQL, (json.dumps(changes),))
                done = [bool(r[0]) for r in await cursor.fetchall()]
                report.skipped += len(changes) - len(done)
                report.resealed += sum(done)
                report.sealed += len(done) - sum(done)
        await cursor.execute(REMAINING_SQL, params)
        report.remaining = {str(k): int(n) for k, n in await cursor.fetchall()}
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(f"Postgres is unreachable: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"re-sealing memory rows failed: {exc}") from exc
    logger.info("%s rotate-key: %s", LOG_PREFIX, report.describe())
    return report
