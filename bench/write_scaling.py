"""Write cost against memory size: `python -m bench.write_scaling [--quick] [--max-facts N] [--no-embeddings]`.

Prints markdown tables (rich), on its own embedded PostgreSQL in a temporary directory (removed afterwards):

- (a) one user holding 100 / 1,000 / 10,000 / 50,000 facts: the time of a 100-fact `update_memory` and of a
  one-fact `remember`, with the ratio to the 100-fact row (targets: 10,000 ≤ 2×, 50,000 ≤ 3×). Users up to
  1,000 facts are filled through `update_memory` in 200-fact calls, larger ones with `bench.write_load.bulk_load`
  (the same statement per 200 facts as the owner, without the manager around it: the same rows). Embeddings
  off: this measures the database path.
- (b) 10,000 facts written through `update_memory` in 200-fact batches: rows stored, writes journaled, the last
  batch's time against the first's (target ≤ 2×).
- (c) the plans of the per-item statements of one `memory_upsert_items` call at the largest size (auto_explain).
- (d) (a) with embeddings on (the offline all-MiniLM-L6-v2 on onnxruntime, `HF_HUB_OFFLINE=1`) at 100 / 1,000 /
  10,000 facts: each fact is embedded and its near-duplicates probed by vector (HNSW) too. The bulk-loaded user's
  vectors are computed by the same embedder and stored by `memory_set_embeddings`. Left out without the
  `[local]` extra.

The facts are `bench.write_load.bench_facts`: short, one category and guard, most trigrams shared, the hard
case for the near-duplicate probe.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID, uuid4

import psycopg
from rich.console import Console

from bench.embedded import database_settings, migrated
from bench.tables import BenchTable, render
from bench.write_load import bench_facts, bulk_load
from memory_plugin import MemoryManager, MemoryUpdate, ResilientStore
from memory_plugin.embeddings.factory import local_available
from memory_plugin.write.items import items_from_update

__all__ = ["FULL", "QUICK", "Sizes", "bench_write_scaling", "main"]

_API_LOAD_MAX = 1_000
"""Users up to this many facts are filled through update_memory; larger ones through the bulk loader."""
_BATCH = 100
_FILL_BATCH = 200


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark writes."""

    fact_counts: tuple[int, ...]
    timed_calls: int
    acceptance_facts: int
    embedded_counts: tuple[int, ...] = ()


FULL = Sizes(
    fact_counts=(100, 1_000, 10_000, 50_000),
    timed_calls=5,
    acceptance_facts=10_000,
    embedded_counts=(100, 1_000, 10_000),
)
QUICK = Sizes(fact_counts=(100, 400), timed_calls=1, acceptance_facts=600, embedded_counts=(100, 400))
_TARGETS = {10_000: 2.0, 50_000: 3.0}


def _pending(memory: MemoryManager) -> int:
    store = memory.store
    return store.pending_writes if isinstance(store, ResilientStore) else 0


async def _fill(memory: MemoryManager, url: str, user: UUID, count: int) -> str:
    """Give `user` `count` facts (with the manager's embeddings, if it has an embedder); say how."""
    if count <= _API_LOAD_MAX:
        for start in range(0, count, _FILL_BATCH):
            batch = bench_facts(start, min(_FILL_BATCH, count - start))
            await memory.update_memory(MemoryUpdate(user_id=user, new_facts=batch))
        return "update_memory"
    facts = bench_facts(0, count)
    vectors: list[Sequence[float]] | None = None
    embedder = memory.embedder
    if embedder is not None:
        embedded = await memory._writer.embed_items(items_from_update(facts, None, None, [], None))
        vectors = [item.embedding for item in embedded if item.embedding is not None]

    def load() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            model = None if embedder is None else embedder.name
            bulk_load(conn, user, facts, vectors=vectors, model=model)

    await asyncio.to_thread(load)
    return "bulk_load"


async def _time_writes(memory: MemoryManager, user: UUID, n: int, calls: int) -> tuple[float, float]:
    """Median ms of a 100-new-fact update_memory and of a one-fact remember (new facts each call)."""
    batch_ms: list[float] = []
    single_ms: list[float] = []
    base = 1_000_000 + n  # facts the user does not hold yet
    for call in range(calls):
        facts = bench_facts(base + call * (_BATCH + 1), _BATCH)
        started = time.perf_counter()
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=facts))
        batch_ms.append((time.perf_counter() - started) * 1000)
        note = bench_facts(base + call * (_BATCH + 1) + _BATCH, 1)[0].content
        started = time.perf_counter()
        await memory.remember(user, note)
        single_ms.append((time.perf_counter() - started) * 1000)
    return statistics.median(batch_ms), statistics.median(single_ms)


async def _scaling(
    memory: MemoryManager, url: str, sizes: Sizes, counts: tuple[int, ...], *, embeddings: bool = False
) -> tuple[BenchTable, UUID]:
    table = BenchTable(
        key="write_scaling_embedded" if embeddings else "write_scaling",
        title="(d) write cost against the user's memory, embeddings on (offline all-MiniLM-L6-v2, onnxruntime)"
        if embeddings
        else "(a) write cost against the user's memory (embedded PostgreSQL, RLS on, embeddings off)",
        columns=["facts stored", "filled by", "update_memory 100 facts ms", "ratio", "remember 1 fact ms", "ratio",
                 "target", "result"],
    )  # fmt: skip
    first: tuple[float, float] | None = None
    user = uuid4()
    vectors: list[str] = []
    for n in counts:
        user = uuid4()
        how = await _fill(memory, url, user, n)
        await _time_writes(memory, user, n, 1)  # warm: this user's first plans
        before = memory.stats  # a snapshot; only writes run until the next one, so embedding_failures are theirs
        batch_ms, single_ms = await _time_writes(memory, user, n, sizes.timed_calls)
        after = memory.stats
        embedded, failed = (
            after.facts_embedded - before.facts_embedded,
            after.embedding_failures - before.embedding_failures,
        )
        vectors.append(f"{n:,}: {embedded:,} ({failed:,} failed)")
        first = first or (batch_ms, single_ms)
        ratio_batch, ratio_single = batch_ms / first[0], single_ms / first[1]
        target = _TARGETS.get(n)
        table.rows.append(
            [
                f"{n:,}",
                how,
                f"{batch_ms:.1f}",
                f"{ratio_batch:.2f}×",
                f"{single_ms:.1f}",
                f"{ratio_single:.2f}×",
                f"≤ {target:g}×" if target else "—",
                ("✅ met" if max(ratio_batch, ratio_single) <= target else "❌ missed") if target else "—",
            ]
        )
    table.notes.append(
        f"median of {sizes.timed_calls} calls after one warm-up call per user; each 100-fact call adds new facts"
        " (no repeats), so the user's count grows by 101 a call"
    )
    if embeddings:
        table.notes.append("texts embedded during the timed calls, by size: " + "; ".join(vectors))
    return table, user


async def _acceptance(memory: MemoryManager, total: int) -> BenchTable:
    user = uuid4()
    times: list[float] = []
    for start in range(0, total, _FILL_BATCH):
        started = time.perf_counter()
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=bench_facts(start, _FILL_BATCH)))
        times.append(time.perf_counter() - started)
    rows = await memory.store.count_facts(user)
    # The first and last few batches, so one noisy call does not decide the ratio.
    head, tail = statistics.median(times[:3]), statistics.median(times[-3:])
    table = BenchTable(
        key="write_acceptance",
        title=f"(b) {total:,} facts through update_memory in {_FILL_BATCH}-fact batches (one user)",
        columns=["batches", "facts stored", "journaled", "first batches s", "last batches s", "last / first",
                 "slowest batch s", "target", "result"],
    )  # fmt: skip
    ratio = tail / head
    table.rows.append(
        [
            f"{len(times):,}",
            f"{rows:,}",
            f"{_pending(memory):,}",
            f"{head:.3f}",
            f"{tail:.3f}",
            f"{ratio:.2f}×",
            f"{max(times):.3f}",
            "≤ 2×",
            "✅ met" if ratio <= 2 else "❌ missed",
        ]
    )
    table.notes.append(
        "first/last: median of the first and of the last three batches; facts stored counts current facts"
        " (a few of the benchmark facts are near-duplicates of others and reinforce them)"
    )
    return table


def _plan(url: str, user: UUID, start: int) -> BenchTable:
    """auto_explain of one 20-item memory_upsert_items call (as the owner): each nested statement's scans."""
    items = items_from_update(bench_facts(start, 20), None, None, [], None)
    payload = json.dumps([item.as_json() for item in items], ensure_ascii=False)
    messages: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("load 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_analyze = on",
            "auto_explain.log_nested_statements = on",
            "client_min_messages = log",
        ):
            conn.execute(f"set {setting}")
        conn.add_notice_handler(lambda diag: messages.append(diag.message_primary or ""))
        conn.execute("set auto_explain.log_min_duration = -1")
        with conn.transaction(force_rollback=True):  # this connection's first write: caches, not plans
            conn.execute("select count(*) from public.memory_upsert_items(%s, %s::jsonb)", (user, payload))
        conn.execute("set auto_explain.log_min_duration = 0")
        with conn.transaction(force_rollback=True):
            conn.execute("select count(*) from public.memory_upsert_items(%s, %s::jsonb)", (user, payload))
    table = BenchTable(
        key="write_plan",
        title="(c) the statements inside one 20-fact memory_upsert_items call, largest user (auto_explain)",
        columns=["statement (first line)", "runs", "total ms"],
    )
    runs: dict[str, list[float]] = {}
    code: list[str] = []
    for message in messages:
        head = message.split("\n", 1)[0]
        text = message.split("Query Text:", 1)[-1].strip().splitlines()
        first = next((ln.strip() for ln in text if ln.strip() and not ln.strip().startswith("--")), "?")[:80]
        new = first not in runs
        runs.setdefault(first, []).append(float(head.removeprefix("duration: ").split(" ms", 1)[0]))
        for line in message.splitlines() if new else ():
            if "Scan" in line and "Function Scan" not in line and "Tuplestore" not in line:
                code.append(f"{first[:40]:40} | {line.strip()[:150]}")
    table.rows = [[first, f"{len(ms):,}", f"{sum(ms):.3f}"] for first, ms in runs.items()]
    table.code = code[:40]
    table.notes.append("scans: each statement's first run (the per-item ones run once per item or fact)")
    return table


async def bench_write_scaling(sizes: Sizes) -> list[BenchTable]:
    """The three tables, on an embedded PostgreSQL in a temporary directory."""
    async with migrated(None, prefix="memory-plugin-write-scaling-") as url:
        settings = database_settings(url)
        async with MemoryManager.open(settings) as memory:
            scaling, largest = await _scaling(memory, url, sizes, sizes.fact_counts)
            acceptance = await _acceptance(memory, sizes.acceptance_facts)
        plan = await asyncio.to_thread(_plan, url, largest, 2_000_000)
        tables = [scaling, acceptance, plan]
        if sizes.embedded_counts and local_available():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the packaged model: no download, no network
            local = settings.model_copy(update={"embedding_model": "local", "local_embedding_runtime": "onnx"})
            async with MemoryManager.open(local) as memory:
                embedded, _ = await _scaling(memory, url, sizes, sizes.embedded_counts, embeddings=True)
            embedded.notes.append(
                "each write embeds its facts (one model call per 64) and probes near-duplicates by vector (HNSW) and"
                " by trigrams; the bulk-loaded user's vectors come from the same embedder"
            )
            tables.append(embedded)
        return tables


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.write_scaling [--quick] [--max-facts N] [--no-embeddings]`."""
    parser = argparse.ArgumentParser(prog="python -m bench.write_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--max-facts", type=int, default=None, help="leave out the sizes above this")
    parser.add_argument("--no-embeddings", action="store_true", help="leave out table (d) (embeddings on)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.no_embeddings:
        sizes = Sizes(sizes.fact_counts, sizes.timed_calls, sizes.acceptance_facts, ())
    if args.max_facts is not None:
        kept = tuple(n for n in sizes.fact_counts if n <= args.max_facts)
        embedded = tuple(n for n in sizes.embedded_counts if n <= args.max_facts)
        sizes = Sizes(kept, sizes.timed_calls, min(sizes.acceptance_facts, args.max_facts), embedded)
    console = Console(width=240, soft_wrap=False)
    console.print(
        f"# memory_plugin write scaling ({'quick' if args.quick else 'full'})\n\n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}",
        markup=False,
        highlight=False,
    )
    started = time.perf_counter()
    tables = asyncio.run(bench_write_scaling(sizes))
    render(tables, console)
    console.print(f"\n_total {time.perf_counter() - started:.1f} s_", markup=False, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
