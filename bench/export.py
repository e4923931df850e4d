"""Export and import of one large user: time, document size and the exporting process's peak Python memory.

    python -m bench.export                     # 50,000 facts and 1,000 chats of ~20 kB each
    python -m bench.export --facts 5000 --chats 100

The user's rows are written by SQL (what they hold does not matter to the export); the export is read as the
user under row-level security, as `MemoryManager.export_user` and `GET /api/memory/export` do. The peak is
`tracemalloc`'s: Python allocations while the chunks are consumed and dropped, as a streamed response does.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc
from uuid import UUID, uuid4

import psycopg
from rich.console import Console

from bench.embedded import migrated_database
from bench.tables import BenchTable, render
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.export import export_chunks, import_into_url

FACTS_SQL = """
insert into public.user_memory (user_id, kind, category, content, content_hash, confidence, source, session_id,
                                source_message_ids, metadata)
select %(user)s, 'fact', 'fact',
       'Hecho ' || n || ': pide piezas de fresado CNC en aluminio 7075 con tolerancia de 0.05 mm y entrega en '
       || (n %% 28 + 1) || ' días, con certificado de material y embalaje individual',
       md5(%(user)s::text || n), 0.8, 'inferred', 'session-' || (n / 50), array['m' || n], '{"turn": 1}'::jsonb
  from generate_series(1, %(facts)s) as n
"""
CHATS_SQL = """
insert into public.chats (user_id, title, full_history, assistant_history, turn_count)
select %(user)s, 'Pedido ' || n, h.history, h.history, 20
  from generate_series(1, %(chats)s) as n,
       (select jsonb_agg(jsonb_build_object('kind', 'request', 'parts', jsonb_build_array(
                   jsonb_build_object('part_kind', 'user-prompt', 'content', repeat('texto de la conversación ', 40)))))
                   as history
          from generate_series(1, 20)) as h
"""


async def fill(url: str, user: UUID, facts: int, chats: int) -> None:
    """Write `facts` facts and `chats` chats of `user`, without the search index (triggers off: the export does
    not read it, and building it takes as long as an import does)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("set session_replication_role = replica")
        await conn.execute(FACTS_SQL, {"user": user, "facts": facts})
        await conn.execute(CHATS_SQL, {"user": user, "chats": chats})


async def measure_export(url: str, user: UUID, *, keep: bool = False) -> tuple[float, int, int, str]:
    """(seconds, characters, peak bytes of Python memory, the document if `keep`) of one export as the user."""
    parts: list[str] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        tracemalloc.start()
        started = time.perf_counter()
        size = 0
        async for chunk in export_chunks(conn, user, as_user=True):
            size += len(chunk)
            if keep:
                parts.append(chunk)
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return seconds, size, peak, "".join(parts)


async def run(url: str, facts: int, chats: int) -> BenchTable:
    """Fill, export, erase, import, export again; one table."""
    user = uuid4()
    started = time.perf_counter()
    await fill(url, user, facts, chats)
    filled = time.perf_counter() - started
    seconds, size, peak, _ = await measure_export(url, user)
    _, _, _, document = await measure_export(url, user, keep=True)
    async with await MemoryAdmin.connect(url) as admin:
        await admin.erase_user(user)
    started = time.perf_counter()
    report = await import_into_url(url, document)
    imported = time.perf_counter() - started
    _, again, _, _ = await measure_export(url, user)
    table = BenchTable(
        key="export",
        title=f"Export and import of one user: {facts:,} facts, {chats:,} chats",
        columns=["step", "seconds", "document MB", "peak Python MB"],
    )
    mb = 1_000_000
    table.rows.append(["fill (SQL, no search index)", f"{filled:.1f}", "", ""])
    table.rows.append(["export (streamed, as the user)", f"{seconds:.1f}", f"{size / mb:.1f}", f"{peak / mb:.1f}"])
    table.rows.append(["import (one transaction, index built)", f"{imported:.1f}", f"{len(document) / mb:.1f}", ""])
    table.notes.append(f"{report.total:,} rows restored; the export after the import is {again:,} characters")
    return table


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facts", type=int, default=50_000)
    ap.add_argument("--chats", type=int, default=1_000)
    args = ap.parse_args(argv)
    with migrated_database("export-bench-") as url:
        render([asyncio.run(run(url, args.facts, args.chats))], Console())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
