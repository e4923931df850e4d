"""`add_message` before and after a change, interleaved: `python -m bench.add_message_ab --before /path/to/checkout`.

Each round runs the same measuring code in a fresh interpreter on the `--before` checkout, then on this one
(`--after`, default: the checkout this module is in), so a load spike on a shared machine hits both sides alike.
Three paths, each on pre-built `Message` objects, round-robin: the manager without a user (1,000 sessions, what
`bench.run` (a) measures), the manager with a user (100 sessions, the per-user cap), and the RAM store alone.
Reported per side: the median over rounds of messages per second of wall time and of process CPU time (CPU time
is what a loaded machine distorts least).
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

from .tables import BenchTable, to_markdown

__all__ = ["main"]

_MEASURE = r"""
import asyncio, json, sys, time
from uuid import uuid4
from bench.run import _conversation
from memory_plugin import InMemoryStore, MemoryManager, MemorySettings, SessionStore

n = int(sys.argv[1])
messages = _conversation(n)
sids = [f"session-{i:05d}" for i in range(1000)]
user = uuid4()

def rates(run):
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return [n / (time.perf_counter() - wall), n / (time.process_time() - cpu)]

async def manager(with_user):
    async with MemoryManager.open(MemorySettings(), store=InMemoryStore()) as memory:
        add = memory.add_message
        wall, cpu = time.perf_counter(), time.process_time()
        if with_user:
            for i, m in enumerate(messages):
                await add(sids[i % 100], m, user_id=user)
        else:
            for i, m in enumerate(messages):
                await add(sids[i % 1000], m)
        return [n / (time.perf_counter() - wall), n / (time.process_time() - cpu)]

def raw():
    store = SessionStore()
    add = store.add_message
    for i, m in enumerate(messages):
        add(sids[i % 1000], m)

async def main():
    await manager(False)  # warm-up
    print(json.dumps({"manager": await manager(False), "manager, with user_id": await manager(True),
                      "SessionStore (raw)": rates(raw)}))

asyncio.run(main())
"""


def _measure(checkout: Path, messages: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(messages)], cwd=checkout, env=env, check=True, capture_output=True
    )
    result: dict[str, list[float]] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the version before")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, list[float]]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        runs["before"].append(_measure(args.before, args.messages))
        runs["after"].append(_measure(args.after, args.messages))
    table = BenchTable(
        key="add_message_ab",
        title=f"add_message, before vs after, {args.rounds} interleaved rounds of {args.messages:,} messages",
        columns=["path", "before (wall)", "after (wall)", "before (CPU)", "after (CPU)", "after/before (CPU)"],
    )
    for path in runs["before"][0]:
        wall = {side: statistics.median(r[path][0] for r in runs[side]) for side in runs}
        cpu = {side: statistics.median(r[path][1] for r in runs[side]) for side in runs}
        table.rows.append(
            [
                path,
                f"{wall['before']:,.0f}/s",
                f"{wall['after']:,.0f}/s",
                f"{cpu['before']:,.0f}/s",
                f"{cpu['after']:,.0f}/s",
                f"{cpu['after'] / cpu['before']:.2f}×",
            ]
        )
    table.notes.append(f"before: {args.before}; after: {args.after}; medians over rounds; messages/s")
    print(to_markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
