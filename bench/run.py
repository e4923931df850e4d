"""memory_plugin benchmarks: short-term writes, context latency on PostgreSQL, RAM per session, RLS cost, batch writes,
memory quality over a 200-turn conversation (bench/quality.py).

    python -m bench.run            # full sizes (about a minute)
    python -m bench.run --quick    # shrunk sizes, a smoke run of a few seconds

Prints markdown tables (rich). The Postgres part runs on its own embedded PostgreSQL in a temporary directory,
removed at the end. See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence

from rich.console import Console

from bench.quality import bench_quality
from bench.run_postgres import bench_context
from bench.run_sizes import ADD_MESSAGE_TARGET, FULL, QUICK, Sizes
from bench.run_sizes import verdict as _verdict
from bench.tables import BenchTable, render, to_markdown
from memory_plugin import (
    InMemoryStore,
    MemoryManager,
    MemorySettings,
    Message,
    SessionStore,
)
from memory_plugin.text import normalize_key

__all__ = [
    "FULL",
    "QUICK",
    "BenchTable",
    "Sizes",
    "bench_add_message",
    "bench_context",
    "bench_session_memory",
    "main",
    "render",
    "run_all",
    "to_markdown",
]


# --- (a) add_message throughput -----------------------------------------------------------------------------------


def _conversation(count: int) -> list[Message]:
    """Pre-built messages (building pydantic models is the caller's cost, not the memory's)."""
    texts = [
        "Necesito un presupuesto para 50 soportes en aluminio 7075",
        "Claro, ¿con qué acabado y tolerancias?",
        "Anodizado negro, tolerancia ±0,05 mm",
        "Perfecto, te lo preparo para mañana",
    ]
    return [Message(role="user" if i % 2 == 0 else "assistant", content=texts[i % 4]) for i in range(count)]


async def _manager_add_rate(messages: list[Message], session_ids: list[str]) -> float:
    async with MemoryManager.open(MemorySettings(), store=InMemoryStore()) as memory:
        n_sessions = len(session_ids)
        add = memory.add_message
        start = time.perf_counter()
        for i, message in enumerate(messages):
            await add(session_ids[i % n_sessions], message)
        elapsed = time.perf_counter() - start
        assert memory.stats.messages_added == len(messages)
    return elapsed


def _raw_add_rate(messages: list[Message], session_ids: list[str]) -> float:
    store = SessionStore()
    n_sessions = len(session_ids)
    add = store.add_message
    start = time.perf_counter()
    for i, message in enumerate(messages):
        add(session_ids[i % n_sessions], message)
    elapsed = time.perf_counter() - start
    assert len(store) == n_sessions
    return elapsed


async def bench_add_message(sizes: Sizes) -> BenchTable:
    """(a) Messages per second into short-term memory, through the manager and straight into the SessionStore."""
    messages = _conversation(sizes.messages)
    session_ids = [f"session-{i:05d}" for i in range(sizes.sessions)]
    await _manager_add_rate(messages[: min(10_000, len(messages))], session_ids)  # warm-up
    manager_times = [await _manager_add_rate(messages, session_ids) for _ in range(sizes.repeats)]
    raw_times = [_raw_add_rate(messages, session_ids) for _ in range(sizes.repeats)]

    table = BenchTable(
        key="add_message",
        title="(a) add_message throughput (InMemoryStore, pre-built Message objects)",
        columns=["path", "messages", "sessions", "time (s)", "messages/s", "µs/message", "target", "result"],
    )
    for label, times, target in (
        ("MemoryManager.add_message (awaited)", manager_times, ADD_MESSAGE_TARGET),
        ("SessionStore.add_message (raw)", raw_times, None),
    ):
        elapsed = statistics.median(times)
        rate = sizes.messages / elapsed
        table.rows.append(
            [
                label,
                f"{sizes.messages:,}",
                f"{sizes.sessions:,}",
                f"{elapsed:.3f}",
                f"{rate:,.0f}",
                f"{elapsed / sizes.messages * 1e6:.2f}",
                f"≥ {target:,.0f}/s" if target else "—",
                _verdict(rate >= target) if target else "—",
            ]
        )
    table.notes.append(f"median of {sizes.repeats} run(s); one event loop, one thread; every call validated")
    return table


# --- (c) RAM per live session -------------------------------------------------------------------------------------


def _fill_sessions(n: int, *, unique_messages: bool) -> tuple[int, SessionStore]:
    """Bytes traced after filling `n` sessions (2 messages, 2 entities, 1 intent each), and the store."""
    shared = (Message(role="user", content="Hola"), Message(role="assistant", content="Hola, ¿en qué te ayudo?"))
    normalize_key.cache_clear()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        store = SessionStore(max_sessions=n)
        for i in range(n):
            session_id = f"session-{i:07d}"
            if unique_messages:
                first = Message(role="user", content=f"Necesito {i} piezas")
                second = Message(role="assistant", content=f"Presupuesto {i} enviado")
            else:
                first, second = shared
            store.add_message(session_id, first)
            store.add_message(session_id, second)
            store.update_entities(session_id, {"materials": f"aluminio {i}", "quantity": str(i)})
            store.add_intent(session_id, "budget_request")
        normalize_key.cache_clear()  # the entity-key cache is bounded and global, not per session
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(store) == n
    return used, store


def bench_session_memory(sizes: Sizes) -> BenchTable:
    """(c) RAM per live session, measured with tracemalloc."""
    n = sizes.live_sessions
    total, store = _fill_sessions(n, unique_messages=True)
    del store
    state, store = _fill_sessions(n, unique_messages=False)
    del store
    messages = total - state
    table = BenchTable(
        key="memory",
        title=f"(c) RAM per live session, {n:,} sessions (2 short messages, 2 entities, 1 intent each; tracemalloc)",
        columns=["part", "bytes/session", f"total for {n:,} sessions"],
    )
    for label, value in (
        ("session state (index entry, id, window, entities, intent)", state),
        ("2 Message objects", messages),
        ("total per live session", total),
    ):
        table.rows.append([label, f"{value / n:,.0f}", f"{value / 2**20:,.1f} MiB"])
    table.notes.append("session state measured with 2 shared Message objects; messages = total − state")
    return table


# --- driver -----------------------------------------------------------------------------------------------------------


async def run_all(sizes: Sizes, *, database_url: str | None = None) -> list[BenchTable]:
    """Every benchmark, in order: (a), (b) with its EXPLAIN, (c), (d), (e), (f) memory quality."""

    add_message = await bench_add_message(sizes)
    latency, explain, rls, writes = await bench_context(sizes, database_url)
    ram = await asyncio.to_thread(bench_session_memory, sizes)
    quality: BenchTable = await bench_quality(database_url)  # 200 turns in both sizes: it takes about a second
    return [add_message, latency, explain, ram, rls, writes, quality]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.run [--quick]`."""
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run (< 30 s)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    console = Console(width=240, soft_wrap=False)
    console.print(
        f"# memory_plugin benchmarks ({'quick' if args.quick else 'full'})\n\n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()},"
        f" {platform.processor() or 'unknown CPU'}",
        markup=False,
        highlight=False,
    )
    started = time.perf_counter()
    tables = asyncio.run(run_all(sizes))
    render(tables, console)
    console.print(f"\n_total {time.perf_counter() - started:.1f} s_", markup=False, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
