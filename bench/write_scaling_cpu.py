"""The write path's server CPU against memory size: `python -m bench.write_scaling_cpu`.

The backend's own CPU time (`utime + stime` of its process in `/proc`, which the machine's load does not inflate as
it does wall time) for the statement `PostgresStore` sends (`memory_upsert_items`, as the user under RLS), on its
own embedded PostgreSQL: 1,000 new benchmark facts in 5 statements of 200 and 200 one-fact statements for a new
user (median of 3 rounds), then the same for a user already holding 10,000 facts (written the same way). Run it
from two checkouts (`PYTHONPATH=<checkout>`) to compare versions. Linux only (`/proc`).

Each bench user gets its own `write_burst` row in `memory_private.memory_limits` (written as the superuser before
its writes): the 10,000-fact user writes 11,200 rows in a few seconds, past the default burst of 10,000 and the
100 rows/s refill, and would be refused (PT429) when the machine is fast. The bucket is still charged on every
statement (the rate stays on), so the measured work is the same as under the defaults.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID, uuid4

import psycopg

from bench.embedded import migrated_database
from bench.write_load import bench_facts
from memory_plugin.write.items import items_from_update

__all__ = ["main"]

_SQL = "select count(*) from public.memory_upsert_items(%s, %s::jsonb, 0.1, null, 0.8)"
_TICK = os.sysconf("SC_CLK_TCK")
Conn = psycopg.Connection[tuple[object, ...]]


def _cpu(pid: int) -> float:
    """Seconds of CPU the process has used (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


_BURST = 1e9
"""The bench users' write burst: never spent (the default, 10,000, is less than the 11,200 rows one user writes)."""


def _as_user(conn: Conn, user: UUID) -> None:
    """Give `user` its own write burst (the connection is still the superuser's), then act as `user` under RLS."""
    conn.execute(
        "insert into memory_private.memory_limits (name, user_id, value, description)"
        " values ('write_burst', %s, %s, 'bench.write_scaling_cpu user')",
        (user, _BURST),
    )
    conn.execute("select set_config('role', 'authenticated', false)")
    claims = json.dumps({"sub": str(user), "role": "authenticated"})
    conn.execute("select set_config('request.jwt.claims', %s, false)", (claims,))


def _write(conn: Conn, user: UUID, start: int, count: int) -> None:
    items = items_from_update(bench_facts(start, count), None, None, [], None)
    conn.execute(_SQL, (user, json.dumps([i.as_json() for i in items], ensure_ascii=False)))


def _measure(conn: Conn, user: UUID, start: int) -> tuple[float, float]:
    """CPU s of 1,000 new facts in 5 statements, and CPU ms per one-fact statement (200 of them)."""
    pid = conn.info.backend_pid
    before = _cpu(pid)
    for offset in range(0, 1_000, 200):
        _write(conn, user, start + offset, 200)
    batch = _cpu(pid) - before
    before = _cpu(pid)
    for offset in range(200):
        _write(conn, user, start + 1_000 + offset, 1)
    return batch, (_cpu(pid) - before) / 200 * 1000


def _run(url: str) -> list[str]:
    rows: list[str] = []
    fresh: list[tuple[float, float]] = []
    for round_ in range(3):
        with psycopg.connect(url, autocommit=True) as conn:
            user = uuid4()
            _as_user(conn, user)
            fresh.append(_measure(conn, user, round_ * 100_000))
    batch = statistics.median(b for b, _ in fresh)
    single = statistics.median(s for _, s in fresh)
    rows.append(f"| new user | {batch:.2f} s | {single:.2f} ms |")
    with psycopg.connect(url, autocommit=True) as conn:
        user = uuid4()
        _as_user(conn, user)
        for start in range(0, 10_000, 200):
            _write(conn, user, start, 200)
        batch, single = _measure(conn, user, 10_000)
    rows.append(f"| 10,000 facts | {batch:.2f} s | {single:.2f} ms |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print the markdown table."""
    del argv
    with migrated_database("memory-plugin-write-cpu-") as url:
        print("| user holds | 1,000 new facts (5 statements) | one-fact statement |")
        print("|---|---:|---:|")
        for row in _run(url):
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
