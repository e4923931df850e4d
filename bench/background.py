"""Extraction off the request path: what a turn costs with a slow extraction model, and how fast worker
processes drain the durable queue.

    python -m bench.background [--turns 40] [--extraction-seconds 2] [--jobs 200] [--job-seconds 0.1]

1. `agent.run` latency (p50/p95) over `--turns` turns that each trigger extraction (a memory instruction), with
   an extraction model taking `--extraction-seconds`: background (queued; the default) vs no extraction at all
   vs inline (the answer waits; a few turns only). The agent's own model answers at once, so the table shows
   what memory adds to a turn.
2. Jobs/s drained from `public.memory_jobs` by 1, 2 and 4 worker processes (`background_concurrency` 4 each;
   an extraction model taking `--job-seconds`): `--jobs` jobs queued first, timed from the workers' first
   claim until the queue is empty (their start-up is not counted).

Runs on its own embedded PostgreSQL in a temporary directory. Prints markdown tables; no timing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench.embedded import migrated_database
from bench.tables import percentile
from memory_plugin import MemoryCapability, MemoryDeps, MemoryManager, MemorySettings
from memory_plugin.extraction import LLMExtractor
from memory_plugin.models import Message

ROOT = Path(__file__).resolve().parents[1]


def _settings(url: str, data_dir: str, **overrides: Any) -> MemorySettings:
    return MemorySettings(
        database_url=url, data_dir=Path(data_dir), embedding_model="none", extraction_candidate_facts=0, **overrides
    )


def _slow_extractor(seconds: float) -> LLMExtractor:
    """An extraction model that takes `seconds` and returns one fact per call."""

    async def extract(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(seconds)
        fact = {"content": f"Lleva el encargo {uuid.uuid4().hex[:8]}", "category": "fact", "confidence": 0.9}
        return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args={"facts": [fact]})])

    return LLMExtractor(FunctionModel(extract))


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Anotado.")])


async def _turns(url: str, data_dir: str, mode: str, turns: int, seconds: float) -> list[float]:
    settings = _settings(url, data_dir, background_close_timeout_seconds=0.0)
    async with MemoryManager.open(settings, extractor=_slow_extractor(seconds)) as memory:
        capability = MemoryCapability(memory, extract_facts=mode != "none", extract_inline=mode == "inline")
        agent = Agent(FunctionModel(_answer), deps_type=MemoryDeps, capabilities=[capability])
        user = uuid.uuid4()
        await agent.run("Hola", deps=MemoryDeps(session_id="warm-up", user_id=user))
        timings = []
        for n in range(turns):
            deps = MemoryDeps(session_id=f"s-{n % 8}", user_id=user)
            started = time.perf_counter()
            await agent.run(f"Recuerda que llevo el encargo {n}.", deps=deps)
            timings.append(time.perf_counter() - started)
        return timings


async def _queue_jobs(url: str, data_dir: str, jobs: int) -> None:
    settings = _settings(url, data_dir, background_worker=False, background_max_pending_jobs=max(jobs, 1))
    async with MemoryManager.open(settings) as memory:
        user = uuid.uuid4()
        for n in range(jobs):
            session = f"drain-{n}"
            await memory.add_message(
                session, Message(role="user", content=f"Recuerda que llevo el encargo {n}."), user_id=user
            )
            await memory.schedule_extraction(session, user)


def _queue(url: str, statement: str) -> tuple[int, int]:
    """(unfinished jobs, running jobs), after `statement` (as the superuser)."""
    with psycopg.connect(url, autocommit=True) as conn:
        if statement:
            conn.execute(statement)
        row = conn.execute(
            "select count(*) filter (where state <> 'dead'), count(*) filter (where state = 'running')"
            " from public.memory_jobs"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def _drain(url: str, data_dir: str, workers: int, jobs: int, job_seconds: float) -> float:
    """Jobs/s drained by `workers` processes (`python -m bench.background --worker …`)."""
    _queue(url, "delete from public.memory_jobs")  # what the latency runs left queued at close
    await _queue_jobs(url, data_dir, jobs)
    command = [sys.executable, "-m", "bench.background", "--worker", url, data_dir, str(job_seconds)]
    procs = [subprocess.Popen(command, cwd=ROOT) for _ in range(workers)]  # noqa: ASYNC220 - started once
    try:
        first_claim: float | None = None
        while True:
            await asyncio.sleep(0.02)
            depth, running = _queue(url, "")
            if first_claim is None and (running or depth < jobs):
                first_claim = time.perf_counter()
            if depth == 0:
                break
        assert first_claim is not None
        return jobs / (time.perf_counter() - first_claim)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


async def _worker(url: str, data_dir: str, job_seconds: float) -> None:
    settings = _settings(url, data_dir, background_concurrency=4, background_poll_seconds=0.05)
    async with MemoryManager.open(settings, extractor=_slow_extractor(job_seconds)):
        await asyncio.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--extraction-seconds", type=float, default=2.0)
    ap.add_argument("--inline-turns", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--job-seconds", type=float, default=0.1)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--worker", nargs=3, metavar=("URL", "DATA_DIR", "JOB_SECONDS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        url, data_dir, job_seconds = args.worker
        asyncio.run(_worker(url, data_dir, float(job_seconds)))
        return 0
    # tmp: the `data_dir` the manager and the worker processes share.
    with tempfile.TemporaryDirectory(prefix="background-bench-") as tmp, migrated_database("background-bench-") as url:

        async def run() -> None:
            print(f"## `agent.run` with an extraction model of {args.extraction_seconds:g} s (every turn triggers)\n")
            print("| extraction | turns | p50 ms | p95 ms | max ms |")
            print("|---|---:|---:|---:|---:|")
            for mode, turns in (("none", args.turns), ("background", args.turns), ("inline", args.inline_turns)):
                t = await _turns(url, tmp, mode, turns, args.extraction_seconds)
                print(
                    f"| {mode} | {turns} | {percentile(t, 0.5) * 1000:.1f} | {percentile(t, 0.95) * 1000:.1f}"
                    f" | {max(t) * 1000:.1f} |"
                )
            print(f"\n## Draining {args.jobs} queued jobs (extraction model {args.job_seconds:g} s, 4 per worker)\n")
            print("| worker processes | jobs/s |")
            print("|---:|---:|")
            for workers in (int(w) for w in args.workers.split(",")):
                rate = await _drain(url, tmp, workers, args.jobs, args.job_seconds)
                print(f"| {workers} | {rate:.1f} |")

        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
