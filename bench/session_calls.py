"""The Postgres session store per call, this checkout beside others at the same time:
`python -m bench.session_calls --before /path/to/checkout [/path/to/another] --rounds 8 --calls 300`.

One embedded PostgreSQL (migrated by this checkout) serves every side. Each round runs the same measuring code
in a fresh interpreter on every checkout at once (so a load spike on a shared machine hits all alike), twice:
through the manager (`session_backend="postgres"`, the store on the manager's pool: `add_message` with a user,
`get_short_term`, and the design's session-only `add_message` without a user), then the store alone
(`PostgresSessionStore.connect`, its synchronous calls: `add_message`, `snapshot`, `update_entities`). Each side
appends to a session of its own. Reported per call: the median over rounds of p50 and p95 wall time, of the p50
relative to the first `--before` checkout in the same round, and of the process's CPU time per call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .embedded import migrated_database
from .tables import BenchTable, to_markdown

__all__ = ["main"]

_MEASURE = r"""
import asyncio, json, sys, time, uuid
from pydantic import SecretStr
from memory_plugin.models import Message

url, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]

class Timed:
    def __init__(self, name):
        self.name, self.walls = name, []
    def __enter__(self):
        self.cpu = time.process_time()
        return self
    def lap(self, started):
        self.walls.append((time.perf_counter() - started) * 1000)
    def __exit__(self, *exc):
        per_call = (time.process_time() - self.cpu) / len(self.walls) * 1e6
        out[self.name] = [pct(self.walls, 0.5), pct(self.walls, 0.95), per_call]

def msg(text):
    return Message(role="user", content=text)

user, sess = uuid.uuid4(), f"bench-{uuid.uuid4().hex[:8]}"
if mode == "store":
    from memory_plugin.session.postgres_store import PostgresSessionStore
    s = PostgresSessionStore.connect(url, max_messages=20)
    for i in range(100):
        s.add_message(sess, msg(f"warm {i}"), user_id=user)
    with Timed("store alone: add_message") as t:
        for i in range(n):
            started = time.perf_counter(); s.add_message(sess, msg(f"mensaje {i}"), user_id=user); t.lap(started)
    with Timed("store alone: snapshot") as t:
        for i in range(n):
            started = time.perf_counter(); s.snapshot(sess, user_id=user); t.lap(started)
    with Timed("store alone: update_entities") as t:
        for i in range(n // 2):
            started = time.perf_counter()
            s.update_entities(sess, {"materials": ["aluminio 7075"]}, user_id=user)
            t.lap(started)
    s.close()
else:
    from memory_plugin import MemoryManager, MemorySettings

    async def main():
        settings = MemorySettings(
            database_url=SecretStr(url), auto_migrate=False, embedding_model="none", session_backend="postgres"
        )
        async with MemoryManager.open(settings) as memory:
            await memory.get_memory_context(sess, user)
            for i in range(100):
                await memory.add_message(sess, msg(f"warm {i}"), user_id=user)
            with Timed("manager: add_message") as t:
                for i in range(n):
                    started = time.perf_counter()
                    await memory.add_message(sess, msg(f"mensaje {i}"), user_id=user)
                    t.lap(started)
            with Timed("manager: get_short_term") as t:
                for i in range(n):
                    started = time.perf_counter(); await memory.get_short_term(sess, user_id=user); t.lap(started)
            with Timed("manager: add_message without user") as t:
                for i in range(n // 2):
                    started = time.perf_counter()
                    await memory.add_message(sess, msg(f"sin usuario {i}"))
                    t.lap(started)

    asyncio.run(main())
print(json.dumps(out))
"""

Sample = list[float]
"""p50 ms, p95 ms, CPU µs per call."""


def _round(url: str, checkouts: dict[str, Path], mode: str, calls: int) -> dict[str, dict[str, Sample]]:
    """One round of `mode` on every checkout at once: call -> side -> sample."""
    procs = {
        side: subprocess.Popen(
            [sys.executable, "-c", _MEASURE, url, mode, str(calls)],
            cwd=path,
            env={**os.environ, "PYTHONPATH": str(path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for side, path in checkouts.items()
    }
    result: dict[str, dict[str, Sample]] = {}
    for side, proc in procs.items():
        out, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"{side} failed:\n{err.decode()[-2000:]}")
        for call, sample in json.loads(out.decode().strip().splitlines()[-1]).items():
            result.setdefault(call, {})[side] = sample
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True, help="checkouts to compare with")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    checkouts = {str(path): path for path in [*args.before, args.after]}
    first = str(args.before[0])
    runs: dict[str, dict[str, list[Sample]]] = {}
    with migrated_database("bench-sessions-") as url:
        for _ in range(args.rounds):
            for mode in ("manager", "store"):
                for call, sides in _round(url, checkouts, mode, args.calls).items():
                    for side, sample in sides.items():
                        runs.setdefault(call, {}).setdefault(side, []).append(sample)
    table = BenchTable(
        key="session_calls",
        title=f"Postgres session calls, {args.rounds} rounds of {args.calls} calls, every checkout at once",
        columns=["call", "checkout", "p50 ms", "p95 ms", f"p50 / {Path(first).name}", "CPU µs/call"],
    )
    med = statistics.median
    for call, sides in runs.items():
        for side, samples in sides.items():
            ratio = med(s[0] / b[0] for s, b in zip(samples, sides[first], strict=True))
            table.rows.append(
                [
                    call,
                    Path(side).name or side,
                    f"{med(s[0] for s in samples):.2f}",
                    f"{med(s[1] for s in samples):.2f}",
                    f"{ratio:.2f}×",
                    f"{med(s[2] for s in samples):,.0f}",
                ]
            )
    table.notes.append("medians over rounds; CPU: the measuring process's CPU time (the server's is not counted)")
    print(to_markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
