"""The PostgreSQL part of `bench.run`: `get_memory_context` latency by fact count (with the plan of the context
query), the RLS prelude's cost, and batch writes, on the embedded server `bench.run` starts."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any
from uuid import UUID, uuid4

import psycopg

from bench.embedded import database_settings, migrated
from bench.run_sizes import CONTEXT_P95_TARGET_MS, RLS_PRELUDE_TARGET_MS, RLS_PRELUDE_TARGET_PCT, Sizes
from bench.run_sizes import percentile as _percentile
from bench.run_sizes import verdict as _verdict
from bench.tables import BenchTable
from memory_plugin import (
    MemorizedFact,
    MemoryManager,
    MemoryUpdate,
    Message,
    PostgresStore,
    ResilientStore,
)
from memory_plugin.quality import DecayPolicy

__all__ = ["bench_context"]


# --- (b) get_memory_context latency on PostgreSQL -------------------------------------------------------------------

LOAD_FACTS_SQL = """
insert into public.user_memory (user_id, kind, category, content, confidence, source, importance, relevance_count,
                                content_hash, created_at, updated_at, last_reinforced_at)
select %(user_id)s, 'fact', (array['preference', 'requirement', 'constraint', 'feedback'])[1 + i %% 4],
       'Hecho ' || i || ': prefiere tolerancias de ' || (i %% 97) || ' micras en piezas de aluminio 7075',
       0.6 + random() * 0.4, case when i %% 3 = 0 then 'explicit' else 'inferred' end, 1 + i %% 5, i %% 7,
       md5(%(user_id)s::text || ':' || i), reinforced - random() * interval '30 days', reinforced, reinforced
from (select i, now() - random() * interval '90 days' as reinforced from generate_series(1, %(n)s) as i) as s
"""
LOAD_EXTRAS_SQL = """
insert into public.user_memory (user_id, kind, category, content, confidence, importance, relevance_count,
                                content_hash, attributes, created_at, last_reinforced_at)
select %(user_id)s, k.kind, k.category, k.kind || ' ' || i, 0.9, 3, i %% 4,
       md5(%(user_id)s::text || ':' || k.kind || i), '{}'::jsonb,
       now() - i * interval '1 day', now() - i * interval '1 hour'
from (values ('preference', 'preferred_materials', 5), ('project', 'project', 20), ('pattern', 'pattern', 10))
         as k(kind, category, n),
     lateral generate_series(1, k.n) as i
"""
LOAD_OTHERS_SQL = """
insert into public.user_memory (user_id, kind, category, content, confidence, importance, content_hash,
                                created_at, last_reinforced_at)
select md5('other-user:' || (i %% 1000))::uuid, k.kind, k.category, 'Dato ' || i || ' de otro usuario',
       0.6 + random() * 0.4, 1 + i %% 5, md5('other:' || i), now() - random() * interval '90 days',
       now() - random() * interval '90 days'
from generate_series(1, %(n)s) as i,
     lateral (select case when i %% 10 = 0 then 'project' when i %% 10 = 1 then 'pattern'
                          when i %% 10 = 2 then 'preference' else 'fact' end as kind) as kk,
     lateral (select kk.kind,
                     case kk.kind when 'fact' then (array['preference', 'requirement', 'constraint',
                                                          'feedback'])[1 + i %% 4]
                                  when 'preference' then 'preferred_materials' else kk.kind end as category) as k
"""
# The call get_memory_context makes with the default settings, decay included (half-lives per category, floor).
CONTEXT_CALL_SQL = (
    "select * from public.memory_context(%s, 12, 3, 3, 0.6, 0.3, 0.1, 30, now(),"
    f" '{json.dumps(DecayPolicy().as_json())}'::jsonb, {DecayPolicy().floor}, 20)"
)


def _load_data(url: str, users: dict[int, UUID], other_rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(LOAD_OTHERS_SQL, {"n": other_rows})
        for n, user_id in users.items():
            conn.execute(LOAD_FACTS_SQL, {"user_id": user_id, "n": n})
            conn.execute(LOAD_EXTRAS_SQL, {"user_id": user_id})
        conn.execute("vacuum analyze public.user_memory")


def _explain(url: str, user_id: UUID) -> tuple[dict[str, Any], list[str]]:
    """EXPLAIN (ANALYZE, BUFFERS) of the call, and the plan of the function's body captured with auto_explain."""
    nested: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CONTEXT_CALL_SQL, (user_id,)).fetchall()  # warm the cache like the timed calls did
        row = conn.execute(f"explain (analyze, buffers, format json) {CONTEXT_CALL_SQL}", (user_id,)).fetchone()
        assert row is not None
        plan = row[0]
        summary: dict[str, Any] = (json.loads(plan) if isinstance(plan, str) else plan)[0]
        try:
            conn.execute("load 'auto_explain'")
        except psycopg.Error:
            return summary, nested
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_analyze = on",
            "auto_explain.log_buffers = on",
            "auto_explain.log_timing = on",
            "auto_explain.log_nested_statements = on",
            "client_min_messages = log",
        ):
            conn.execute(f"set {setting}")
        conn.add_notice_handler(lambda diag: nested.append(diag.message_primary or ""))
        conn.execute(CONTEXT_CALL_SQL, (user_id,)).fetchall()
    body = [text for text in nested if "memory_context(" not in text.split("Query Text:", 1)[-1][:80]]
    return summary, (body[0] if body else (nested[0] if nested else "")).splitlines()


def _plan_lines(lines: list[str], limit: int = 40, width: int = 150) -> list[str]:
    """The plan of an auto_explain message without its query text, each line cut to `width` characters."""
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith(("Append", "Result", "Limit"))), len(lines))
    nodes = ("->", "Append", "Result", "Limit", "Sort Method", "Heap Blocks")
    plan = [ln.rstrip() for ln in lines[start:] if ln.strip().startswith(nodes)]
    return [ln if len(ln) <= width else ln[: width - 1] + "…" for ln in plan[:limit]]


async def _time_context(memory: MemoryManager, user_id: UUID, warmup: int, calls: int) -> list[float]:
    session_id = f"bench-{user_id}"
    for text in ("Necesito 50 soportes en aluminio 7075", "¿Con qué acabado?", "Anodizado negro"):
        await memory.add_message(session_id, Message(role="user", content=text), user_id=user_id)
    await memory.update_session_entities(
        session_id, {"materials": ["aluminio 7075"], "quantity": "50"}, user_id=user_id
    )
    for _ in range(warmup):
        await memory.get_memory_context(session_id, user_id)
    timings: list[float] = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        start = clock()
        ctx = await memory.get_memory_context(session_id, user_id)
        timings.append((clock() - start) / 1e6)
        assert ctx.long_term_available
    return sorted(timings)


async def bench_context(sizes: Sizes, database_url: str | None = None) -> list[BenchTable]:
    """(b) get_memory_context latency with N facts for one user, among other users' rows, on PostgreSQL.

    Without `database_url`, starts an embedded PostgreSQL in a temporary directory and removes it afterwards.
    """
    async with migrated(database_url) as url:
        return await _bench_context(sizes, url)


async def _bench_context(sizes: Sizes, database_url: str) -> list[BenchTable]:
    users = {n: uuid4() for n in sizes.fact_counts}
    started = time.perf_counter()
    await asyncio.to_thread(_load_data, database_url, users, sizes.other_rows)
    load_seconds = time.perf_counter() - started

    latency = BenchTable(
        key="context",
        title="(b) get_memory_context latency, embedded PostgreSQL (MemoryManager → PostgresStore, one round trip)",
        columns=[
            *("facts of the user", "other users' rows", "calls", "p50 ms", "p95 ms", "p99 ms", "mean ms"),
            *("max ms", "target", "result"),
        ],
    )
    largest = max(sizes.fact_counts)
    # Embeddings off: these tables measure the database path; writes and searches with embeddings are measured
    # by bench/locomo.py and bench/retrieval_latency.py.
    settings = database_settings(database_url)
    async with MemoryManager.open(settings) as memory:
        for n in sizes.fact_counts:
            timings = await _time_context(memory, users[n], sizes.warmup_calls, sizes.timed_calls)
            p95 = _percentile(timings, 95)
            target = n == largest
            latency.rows.append(
                [
                    f"{n:,} facts",
                    f"{sizes.other_rows:,}",
                    f"{len(timings):,}",
                    f"{_percentile(timings, 50):.2f}",
                    f"{p95:.2f}",
                    f"{_percentile(timings, 99):.2f}",
                    f"{statistics.fmean(timings):.2f}",
                    f"{timings[-1]:.2f}",
                    f"p95 ≤ {CONTEXT_P95_TARGET_MS:g} ms" if target else "—",
                    _verdict(p95 <= CONTEXT_P95_TARGET_MS) if target else "—",
                ]
            )
    latency.notes.append(
        f"after {sizes.warmup_calls} warm-up calls; each call returns 12 ranked facts, 5 preferences, 3 projects,"
        f" 3 patterns and the session's messages; data loaded in {load_seconds:.1f} s with INSERT … SELECT"
        " generate_series"
    )

    summary, nested = await asyncio.to_thread(_explain, database_url, users[largest])
    plan = summary["Plan"]
    explain = BenchTable(
        key="explain",
        title=f"EXPLAIN (ANALYZE, BUFFERS) select * from public.memory_context(…) — {largest:,} facts",
        columns=["measure", "value"],
        rows=[
            ["planning time", f"{summary.get('Planning Time', float('nan')):.3f} ms"],
            ["execution time", f"{summary.get('Execution Time', float('nan')):.3f} ms"],
            ["shared buffers hit", f"{plan.get('Shared Hit Blocks', 0):,}"],
            ["shared buffers read", f"{plan.get('Shared Read Blocks', 0):,}"],
            ["rows returned", f"{plan.get('Actual Rows', 0):,.0f}"],
        ],
    )
    explain.code = _plan_lines(nested)
    if explain.code:
        explain.notes.append("plan of the function body (the four ranked selects), captured with auto_explain:")
    async with MemoryManager.open(settings) as memory:
        rls = await _bench_rls_prelude(memory, users[largest], sizes)
        writes = await _bench_batch_writes(memory, sizes)
    return [latency, explain, rls, writes]


async def _bench_rls_prelude(memory: MemoryManager, user_id: UUID, sizes: Sizes) -> BenchTable:
    """get_memory_context as the user under RLS (the default) vs as the pool's role, interleaved rounds."""
    store = memory.store
    if isinstance(store, ResilientStore):  # the manager's default wrapper; the prelude is the primary's
        store = store.primary
    assert isinstance(store, PostgresStore)
    rounds = 6
    per_round = max(sizes.timed_calls // rounds, 10)
    timings: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for act_as_user in (True, False):  # alternate, so drift on a shared machine hits both alike
                store.act_as_user = act_as_user
                timings[act_as_user] += await _time_context(memory, user_id, 5, per_round)
    finally:
        store.act_as_user = True
    table = BenchTable(
        key="rls",
        title=f"(d) cost of the RLS prelude: get_memory_context, {max(sizes.fact_counts):,} facts",
        columns=["identity", "calls", "p50 ms", "p95 ms", "mean ms"],
    )
    for act_as_user, label in ((True, "as the user (set role + JWT claims, RLS)"), (False, "as the pool's role")):
        t = sorted(timings[act_as_user])
        table.rows.append(
            [
                label,
                f"{len(t):,}",
                f"{_percentile(t, 50):.3f}",
                f"{_percentile(t, 95):.3f}",
                f"{statistics.fmean(t):.3f}",
            ]
        )
    with_rls, without = sorted(timings[True]), sorted(timings[False])
    d50 = _percentile(with_rls, 50) - _percentile(without, 50)
    d95 = _percentile(with_rls, 95) - _percentile(without, 95)
    rel = d50 / _percentile(without, 50) * 100
    table.rows.append(["difference", "—", f"{d50:+.3f} ({rel:+.1f} %)", f"{d95:+.3f}", "—"])
    verdict = _verdict(d50 <= RLS_PRELUDE_TARGET_MS or rel <= RLS_PRELUDE_TARGET_PCT)
    table.notes.append(
        f"{rounds} interleaved rounds of {per_round} calls per identity; target: p50 difference"
        f" ≤ {RLS_PRELUDE_TARGET_PCT:g} % or ≤ {RLS_PRELUDE_TARGET_MS:g} ms — {verdict}"
    )
    return table


async def _bench_batch_writes(memory: MemoryManager, sizes: Sizes) -> BenchTable:
    """update_memory with 1,000 new facts (one statement), then the same 1,000 again (reinforcements),
    beside 1,000 one-fact calls."""
    batch = 1_000
    repeats = max(sizes.repeats, 1)

    def facts(tag: str) -> list[MemorizedFact]:
        return [
            MemorizedFact(
                content=f"{tag}: tolerancia de {i} micras en bridas de latón",
                category="requirement",
                confidence=0.9,
                source="explicit",
                importance=1 + i % 5,
            )
            for i in range(batch)
        ]

    rows: dict[str, list[float]] = {"new": [], "repeat": [], "single": []}
    for r in range(repeats):
        user = uuid4()
        items = facts(f"run {r}")
        for key in ("new", "repeat"):
            start = time.perf_counter()
            stored = await memory.update_memory(MemoryUpdate(user_id=user, new_facts=items))
            rows[key].append(time.perf_counter() - start)
            assert len(stored) == batch
        single_user = uuid4()
        start = time.perf_counter()
        for fact in facts(f"single {r}"):
            await memory.update_memory(MemoryUpdate(user_id=single_user, new_facts=[fact]))
        rows["single"].append(time.perf_counter() - start)
    table = BenchTable(
        key="writes",
        title="(e) long-term write throughput: 1,000 facts through update_memory (embedded PostgreSQL, RLS on)",
        columns=["write", "statements", "time (s)", "facts/s"],
    )
    labels = {
        "new": ("1,000 new facts, one update_memory call", "1"),
        "repeat": ("the same 1,000 again (all reinforced), one call", "1"),
        "single": ("1,000 new facts, one call each", "1,000"),
    }
    for key, (label, statements) in labels.items():
        seconds = statistics.median(rows[key])
        table.rows.append([label, statements, f"{seconds:.3f}", f"{batch / seconds:,.0f}"])
    table.notes.append(
        f"median of {repeats} run(s); each call validates, filters sensitive data and writes as the user"
    )
    return table
