"""Import time of one user by fact count, two checkouts side by side (each with its own code and migrations).

    python -m bench.export_import --before /work/before            # 1,000 / 10,000 / 50,000 facts
    python -m bench.export_import --before DIR --sizes 1000,5000

For each size and checkout in turn (before, after, next size…) a child interpreter (`PYTHONPATH=<checkout>`)
starts an embedded PostgreSQL in a temporary directory, applies that checkout's migrations, writes the facts by
SQL, exports the user, erases them, imports the document (timed: one transaction, search index built), exports
again and checks the document is the same. The facts are the same in both runs (`bench.export`'s text, 50 facts
a session). Results: docs/export.md ("Cost").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from bench.tables import BenchTable, render

CHILD = r"""
import asyncio, json, sys, tempfile, time
from pathlib import Path
from uuid import uuid4
import psycopg
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.database.migrations import migrate
from memory_plugin.export import export_chunks, import_into_url

FACTS_SQL = '''
insert into public.user_memory (user_id, kind, category, content, content_hash, confidence, source, session_id,
                                source_message_ids, metadata, created_at)
select %(user)s, 'fact', 'fact',
       'Hecho ' || n || ': pide piezas de fresado CNC en aluminio 7075 con tolerancia de 0.05 mm y entrega en '
       || (n %% 28 + 1) || ' días, con certificado de material y embalaje individual',
       md5(%(user)s::text || n), 0.8, 'inferred', 'session-' || (n / 50), array['m' || n], '{"turn": 1}'::jsonb,
       now() + n * interval '1 ms'
  from generate_series(1, %(facts)s) as n
'''


async def document(url, user):
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return "".join([c async for c in export_chunks(conn, user, as_user=False)])


async def one(url, facts):
    user = uuid4()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("set session_replication_role = replica")  # the fill: no index, no counts
        await conn.execute(FACTS_SQL, {"user": user, "facts": facts})
    first = await document(url, user)
    async with await MemoryAdmin.connect(url) as admin:
        await admin.erase_user(user)
    started = time.perf_counter()
    await import_into_url(url, first)
    seconds = time.perf_counter() - started
    same = await document(url, user) == first
    async with await MemoryAdmin.connect(url) as admin:
        await admin.erase_user(user)
    return {"facts": facts, "seconds": seconds, "mb": len(first) / 1e6, "same": same}


async def main(url, sizes):
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)
    for facts in sizes:
        print(json.dumps(await one(url, facts)), flush=True)


with tempfile.TemporaryDirectory(prefix="import-bench-") as tmp:
    embedded = EmbeddedPostgres(Path(tmp))
    url = embedded.start()
    try:
        asyncio.run(main(url, [int(s) for s in sys.argv[1].split(",")]))
    finally:
        embedded.stop()
"""


def measure(checkout: Path, sizes: list[int]) -> dict[int, dict[str, float]]:
    """{facts: {seconds, mb, same}} of one checkout, from a child interpreter running its code."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(map(str, sizes))],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{checkout}: {done.stderr[-2000:]}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {int(r["facts"]): r for r in rows}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="checkout of the previous version")
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--sizes", default="1000,10000,50000")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    before: dict[int, dict[str, float]] = {}
    after: dict[int, dict[str, float]] = {}
    for facts in sizes:  # interleaved, so both checkouts see about the same load on a shared machine
        before.update(measure(args.before, [facts]))
        after.update(measure(args.after, [facts]))
    table = BenchTable(
        key="import",
        title="Import of one user (one transaction, search index built), seconds",
        columns=["facts", "document MB", "before s", "after s", "ratio", "round trip same"],
    )
    for facts in sizes:
        b, a = before[facts], after[facts]
        same = "yes" if b["same"] and a["same"] else "NO"
        ratio = b["seconds"] / a["seconds"] if a["seconds"] else float("inf")
        row = [f"{facts:,}", f"{a['mb']:.1f}", f"{b['seconds']:.1f}", f"{a['seconds']:.1f}", f"{ratio:.1f}×", same]
        table.rows.append(row)
    render([table], Console())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
