"""What `MemoryCapability(memory)` adds to each agent turn, before (a checkout given with --before) and after.

    python -m bench.context_overhead               # /work/base and /work/before against this checkout, 40 turns
    python -m bench.context_overhead --before /path --before /other --turns 80

The sides: each `--before` checkout's default `MemoryCapability(memory)` (at /work/base the memory block in the
instructions), the first one's opt-in budgeted context (`MemoryCapability(memory, context=await
ContextBuilder.open(…))`, `--builder` to include it), and the default now. Each side runs in its
own process (its own `memory_plugin` on PYTHONPATH, its own embedded Postgres under
`$MEMORY_DATA_DIR-<side>`), alternating before/after for `--rounds` rounds so that machine noise falls on
both. A round is a fresh user and session with the shop conversation below, through a real pydantic-ai
`Agent` on a `FunctionModel` that answers at once, with the capability's defaults (extraction queued to the
in-process worker); the same turn without any capability is timed alongside, so the overhead is the
difference of the two. Reported: p50/p95 per turn of the run with memory, of the run without, and of the
overhead; and what the process sent to Postgres per turn (each `execute`, a transaction block's BEGIN and
COMMIT; background work included), which machine load does not change, and this process's CPU time per turn
pair after the first (with and without memory, background work included; the database server's is not), which
load changes far less than wall time. Only the public API is used, so the same file measures any version.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

QUESTIONS = [
    "¿Qué plazo tendríais para {n} brazos de aluminio 7075?",
    "Somos un taller de drones en Zaragoza y necesitamos {n} placas base.",
    "Nunca me sugieras fibra de vidrio, no nos sirve.",
    "Hemos decidido usar tornillos de titanio en los {n} soportes.",
    "¿Cuánto costarían {n} soportes de motor con tolerancia de ±0,05 mm?",
    "gracias",
]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(turns: int, variant: str) -> dict[str, list[float]]:
    """Per-turn seconds with and without the capability, on the `memory_plugin` this process imports
    (`variant` "builder": with an opt-in `ContextBuilder` of its own, as the earlier version offered it)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from memory_plugin import MemoryCapability, MemoryDeps, MemoryManager, MemorySettings

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Para esa pieza, unas dos semanas y 14 € por unidad.")])

    times: dict[str, list[float]] = {"memory": [], "plain": [], "messages": [], "cpu": []}
    sent = _count_database_messages()
    settings = MemorySettings(embedding_model="none")
    async with MemoryManager.open(settings) as memory:
        capability = MemoryCapability(memory)
        if variant == "builder":
            from memory_plugin.context.builder import ContextBuilder

            context = await ContextBuilder.open(memory, settings, database_url=memory.database_url)
            capability = MemoryCapability(memory, context=context)
        with_memory = Agent(FunctionModel(answer), deps_type=MemoryDeps, capabilities=[capability])
        plain = Agent(FunctionModel(answer), deps_type=MemoryDeps)
        user = uuid4()
        deps = MemoryDeps(session_id=f"{user}/overhead", user_id=user)
        sent[0] = 0  # opening the manager (migrations, roles) is not a turn's
        cpu = 0.0
        for turn in range(turns):
            prompt = QUESTIONS[turn % len(QUESTIONS)].format(n=turn + 2)
            started = time.perf_counter()
            await plain.run(prompt, deps=deps)
            times["plain"].append(time.perf_counter() - started)
            started = time.perf_counter()
            await with_memory.run(prompt, deps=deps)
            times["memory"].append(time.perf_counter() - started)
            if turn == 0:  # loading the token vocabulary (~0.3 s, once per process) is not a turn's
                cpu = time.process_time()
        await memory.flush()
        times["messages"].append(sent[0] / turns)
        times["cpu"].append((time.process_time() - cpu) / max(1, turns - 1))
        if variant == "builder":
            await context.close()
    return times


def _count_database_messages() -> list[int]:
    """Count what this process sends to Postgres (each `execute`, and a transaction block's BEGIN and COMMIT):
    a number machine load does not change, beside the timings it does."""
    import psycopg

    sent = [0]
    # `AsyncConnection.execute` goes through a cursor's: counting the cursor's counts both.
    cursor_execute, transaction = psycopg.AsyncCursor.execute, psycopg.AsyncConnection.transaction

    async def counted_cursor_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return await cursor_execute(self, *args, **kwargs)

    def counted_transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 2
        return transaction(self, *args, **kwargs)

    psycopg.AsyncCursor.execute = counted_cursor_execute  # type: ignore[method-assign]
    psycopg.AsyncConnection.transaction = counted_transaction  # type: ignore[method-assign]
    return sent


def _side(root: Path, side: str, variant: str, turns: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    env["MEMORY_DATA_DIR"] = f"{os.environ.get('MEMORY_DATA_DIR', '/tmp/context-overhead')}-{side}"
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", str(turns), "--variant", variant],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, list[float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _commit(root: Path) -> str:
    """The checkout's short commit (its path when it is not a git checkout)."""
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or str(root)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", type=Path, action="append", help="a checkout to compare (repeatable)")
    parser.add_argument("--builder", action="store_true", help="also the first checkout's opt-in ContextBuilder")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="default", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(asyncio.run(measure(args.measure, args.variant))))
        return
    after = Path(__file__).resolve().parents[1]
    befores: list[Path] = args.before or [Path("/work/base"), Path("/work/before")]
    # side -> (checkout, variant, data dir suffix)
    sides = {
        f"{_commit(root)}, MemoryCapability(memory)": (root, "default", f"before{i}") for i, root in enumerate(befores)
    }
    if args.builder:
        sides[f"{_commit(befores[0])}, opt-in ContextBuilder"] = (befores[0], "builder", "before0")
    sides["after, MemoryCapability(memory)"] = (after, "default", "after")
    kinds = ("memory", "plain", "messages", "cpu")
    times: dict[str, dict[str, list[float]]] = {s: {k: [] for k in kinds} for s in sides}
    for _ in range(args.rounds):
        for side, (root, variant, data) in sides.items():
            for kind, values in _side(root, data, variant, args.turns).items():
                times[side][kind] += values
    print(f"Capability overhead per turn, ms ({args.rounds} x {args.turns} turns per side, embedded Postgres)")
    print(
        "| side | with memory p50 | p95 | without p50 | p95 | overhead p50 | p95 | database messages per turn"
        " | process CPU per turn pair |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for side in sides:
        memory, plain = times[side]["memory"], times[side]["plain"]
        extra = [m - p for m, p in zip(memory, plain, strict=True)]
        cells = [_percentile(v, q) * 1000 for v in (memory, plain, extra) for q in (0.5, 0.95)]
        messages = statistics.mean(times[side]["messages"])
        cpu = statistics.median(times[side]["cpu"]) * 1000 if times[side]["cpu"] else float("nan")
        print(f"| {side} | " + " | ".join(f"{c:.1f}" for c in cells) + f" | {messages:.1f} | {cpu:.1f} |")
    overhead = {
        s: statistics.median([m - p for m, p in zip(t["memory"], t["plain"], strict=True)]) for s, t in times.items()
    }
    first, *_, last = overhead
    print(f"median overhead, {last} / {first}: {overhead[last] / overhead[first]:.2f}x")


if __name__ == "__main__":
    main()
