"""What the settings cost, before vs after, interleaved: `python -m bench.settings_ab --before /path/to/checkout`.

Each round runs the same measuring code in a fresh interpreter on the `--before` checkout, then on this one, so a
load spike on a shared machine hits both sides alike. Measured, in process CPU time per operation (the best of 5
repeats, then the median over rounds): reading the settings (`MemorySettings()`, with 5 `MEMORY_*` variables
set), a read by flat name (`settings.max_message_chars`, once per `add_message`), the same read by group where the
checkout has groups (`settings.sessions.max_message_chars`), and a flat `model_copy` (what the CLI and tests do).
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
import json, os, time
for name, value in {"MEMORY_SEARCH_CANDIDATES": "120", "MEMORY_POOL_MAX_SIZE": "12", "MEMORY_SESSION_TTL_SECONDS":
                    "600", "MEMORY_HALF_LIFE_DAYS": '{"preference": 90}', "MEMORY_EMBEDDING_MODEL": "none"}.items():
    os.environ[name] = value
from memory_plugin.settings import MemorySettings

def per_op(run, n):
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        run(n)
        best = min(best, (time.process_time() - start) / n)
    return best

def construct(n):
    for _ in range(n):
        MemorySettings()

settings = MemorySettings()

def flat(n):
    s = settings
    for _ in range(n):
        s.max_message_chars

def grouped(n):
    s = settings
    for _ in range(n):
        s.sessions.max_message_chars

def copy(n):
    s = settings
    for _ in range(n):
        s.model_copy(update={"background_worker": False})

result = {"MemorySettings() (µs)": per_op(construct, 50) * 1e6, "flat read (ns)": per_op(flat, 200_000) * 1e9,
          "model_copy, flat name (µs)": per_op(copy, 2_000) * 1e6}
if hasattr(settings, "sessions"):
    result["group read (ns)"] = per_op(grouped, 200_000) * 1e9
print(json.dumps(result))
"""


def _measure(checkout: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", _MEASURE], cwd=checkout, env=env, check=True, capture_output=True)
    result: dict[str, float] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the version before")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        runs["before"].append(_measure(args.before))
        runs["after"].append(_measure(args.after))
    table = BenchTable(
        key="settings_ab",
        title=f"settings, before vs after, {args.rounds} interleaved rounds (CPU time per operation)",
        columns=["operation", "before", "after", "after/before"],
    )
    for operation in runs["after"][0]:
        after = statistics.median(r[operation] for r in runs["after"])
        if operation in runs["before"][0]:
            before = statistics.median(r[operation] for r in runs["before"])
            table.rows.append([operation, f"{before:,.2f}", f"{after:,.2f}", f"{after / before:.2f}×"])
        else:
            table.rows.append([operation, "—", f"{after:,.2f}", ""])
    table.notes.append(f"before: {args.before}; after: {args.after}; best of 5 repeats, median over rounds")
    print(to_markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
