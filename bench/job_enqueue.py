"""The job queue's statements before and after a change of their SQL, interleaved on one server:
`python -m bench.job_enqueue --before /path/to/checkout [--ops 300] [--rounds 3]`.

Two databases on one embedded PostgreSQL (a temporary directory): one migrated from the `--before` checkout's
`supabase/migrations`, one from this checkout's. Limits high enough that no call is deferred or refused (the
path every user under their limit takes). Each round times, in both, `--ops` calls of each statement a
turn or a worker sends (through `PostgresJobQueue`, as `memory_worker`): enqueueing a new job (a new session
each), coalescing into a session's waiting job, and a worker's claim of nothing due (an idle poll; after the
change it also makes deferred jobs due, at most once a second, timed here on every call). The `--before`
schema is driven by this checkout's Python (its statements have the same signatures). Prints p50 / p95 in ms
per statement; no timing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from rich.console import Console

from bench.tables import BenchTable, percentile, render
from memory_plugin.background import PostgresJobQueue
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.migrations import migrate
from memory_plugin.models import Message

HERE = Path(__file__).resolve().parents[1]
SAID = [Message(role="user", content="Recuerda que prefiero latón para los casquillos.")]


async def _database(server_url: str, name: str, migrations: Path) -> str:
    async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = make_conninfo(server_url, dbname=name)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn, migrations)  # type: ignore[arg-type]
    return url


async def _round(queue: PostgresJobQueue, ops: int) -> dict[str, list[float]]:
    """Milliseconds per call of each statement (a fresh user, so the counts start at zero)."""
    user = uuid.uuid4()
    times: dict[str, list[float]] = {"enqueue, new job": [], "enqueue, coalesced": [], "claim, nothing due": []}
    for i in range(ops):
        start = time.perf_counter()
        await queue.enqueue(user, f"s{i}-{uuid.uuid4().hex[:6]}", SAID, "explicit")
        times["enqueue, new job"].append((time.perf_counter() - start) * 1000)
    await queue.enqueue(user, "s0-coalesce", SAID, "explicit")  # the session's waiting job
    for _ in range(ops):
        start = time.perf_counter()
        await queue.enqueue(user, "s0-coalesce", SAID, "explicit")
        times["enqueue, coalesced"].append((time.perf_counter() - start) * 1000)
    for _ in range(ops):
        start = time.perf_counter()
        await queue.claim("bench", 0, 60)
        times["claim, nothing due"].append((time.perf_counter() - start) * 1000)
    return times


async def main(before: Path, ops: int, rounds: int) -> list[BenchTable]:
    with tempfile.TemporaryDirectory(prefix="bench-job-enqueue-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        server_url = await asyncio.to_thread(server.start)
        try:
            urls = {
                "before": await _database(server_url, "before", before / "supabase" / "migrations"),
                "after": await _database(server_url, "after", HERE / "supabase" / "migrations"),
            }
            queues = {
                side: await PostgresJobQueue.connect(
                    url, max_pending=1_000_000, max_messages=20, max_pending_per_user=1_000_000, max_size=1
                )
                for side, url in urls.items()
            }
            queues["before"].promote_every_seconds = float("inf")  # that schema has no deferred jobs to make due
            queues["after"].promote_every_seconds = 0.0  # the worst case: every poll makes deferred jobs due
            samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
            for _ in range(rounds):
                for side, queue in queues.items():  # interleaved: both sides see the same load
                    for name, values in (await _round(queue, ops)).items():
                        samples[side].setdefault(name, []).extend(values)
            for queue in queues.values():
                await queue.close()
        finally:
            await asyncio.to_thread(server.stop)
    table = BenchTable(
        key="job_enqueue",
        title=f"Job queue statements, before vs after, {rounds} interleaved rounds of {ops} calls (ms)",
        columns=["statement", "before p50", "after p50", "before p95", "after p95", "after/before p50"],
    )
    for name in samples["before"]:
        b, a = samples["before"][name], samples["after"][name]
        table.rows.append(
            [
                name,
                f"{percentile(b, 0.5):.2f}",
                f"{percentile(a, 0.5):.2f}",
                f"{percentile(b, 0.95):.2f}",
                f"{percentile(a, 0.95):.2f}",
                f"{percentile(a, 0.5) / max(percentile(b, 0.5), 1e-9):.2f}x",
            ]
        )
    return [table]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", type=Path, required=True, help="checkout of the version before")
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    render(asyncio.run(main(args.before, args.ops, args.rounds)), Console())
