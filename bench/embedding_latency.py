"""Embedding latency of the offline model, torch against onnxruntime, side by side in one run: one question
(what every search waits for) and batches of facts (what every write waits for).

    python -m bench.embedding_latency [--questions PATH] [--calls 400] [--round 20] [--batches 10] [--cache-dir DIR]

Questions go through `MemoryEmbedder.embed_query` (tokenizer, forward pass, pooling, the thread hop) of two local
embedders, one per runtime (`MEMORY_LOCAL_EMBEDDING_RUNTIME`), on one thread each (`MEMORY_LOCAL_EMBEDDING_THREADS`,
default 1); facts through `embed_documents` in batches of 64 (`MEMORY_EMBEDDING_BATCH_SIZE`), texts of 5 to 300+
tokens mixed as writes bring them. The runs are interleaved in rounds (`--round` questions, one batch), the order
swapped every round, so that a change of load on the machine hits both alike. Every text is distinct, so the
query caches never answer. Questions: LoCoMo's development split (`../shared/bench/locomo/questions_dev.jsonl`)
when present, else synthetic ones.

Also reported: the ONNX export time (into a fresh temporary cache unless `--cache-dir`), the opening time of the
cached graph, and the minimum cosine similarity between the two runtimes' vectors, questions and facts. Prints
markdown.

    python -m bench.embedding_latency --question-path [--calls 997] [--cache-dir DIR] [--database]

The search question's path on onnxruntime alone, each step interleaved per question (order rotated), on one
graph (`--cache-dir`, default `MEMORY_DATA_DIR/onnx`, exported if missing): wall p50/p95 and this process's CPU per
call (all its threads) of the previous path (`embed_documents([q])`: a batch of one in a thread, then two float
conversions), `MemoryEmbedder.embed_query` (the searcher's call), the same work on the event loop (not used: it
would block the loop), `encode([q])`, `encode_one(q)`, `session.run` alone (the model's arithmetic), and
`embed_query` on sessions of 2 intra-op threads (spinning as onnxruntime does by default, spinning stopped at the
end of each run, no spinning). Checks that `embed_query` gives bitwise the previous path's floats on every
question. `--database`: each question is followed by a query that keeps an embedded PostgreSQL busy for a few
ms of CPU (what the search's SQL does next), timed with it: threads still spinning after the run slow it down.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import numpy as np

from bench.tables import percentile
from memory_plugin import MemorySettings
from memory_plugin.embeddings import MemoryEmbedder, local, local_available, local_embedder
from memory_plugin.embeddings.onnx_export import export_graph
from memory_plugin.embeddings.onnx_graph import OnnxEncoder, mapped_graph, open_encoder

__all__ = ["main"]

LOCOMO_QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo" / "questions_dev.jsonl"


def _questions(path: Path | None, n: int) -> tuple[list[str], str]:
    if path is not None and path.exists():
        with path.open(encoding="utf-8") as f:
            texts = list(dict.fromkeys(json.loads(line)["question"] for line in f if line.strip()))
        source = f"LoCoMo `{path.name}`"
    else:
        topics = ["pottery", "camping", "painting", "adoption", "running", "guitar", "school", "beach", "dogs"]
        texts = [f"When did Ana go {topics[i % len(topics)]} with her kids, the {i}th time?" for i in range(n)]
        source = "synthetic"
    # Distinct texts for each call: repeats would be answered by the query cache, not the model.
    out = [texts[i % len(texts)] + ("" if i < len(texts) else f" ({i // len(texts)})") for i in range(n)]
    return out, source


def _min_cosine(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cos = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    return float(cos.min())


def _facts(questions: Sequence[str], batches: int, size: int = 64) -> list[list[str]]:
    """Distinct fact-like texts in batches: mostly a sentence, one in eight several (past the 256-token window)."""
    out = []
    for b in range(batches):
        batch = []
        for i in range(size):
            text = f"{questions[(b * size + i) % len(questions)]} — noted in turn {b * size + i}."
            batch.append(" ".join([text] * 30) if i % 8 == 0 else text)
        out.append(batch)
    return out


async def _timed_questions(embedder: MemoryEmbedder, texts: Sequence[str]) -> tuple[list[float], list[list[float]]]:
    times, vectors = [], []
    for text in texts:
        started = time.perf_counter()
        vector = await embedder.embed_query(text)
        times.append((time.perf_counter() - started) * 1000)
        vectors.append(list(vector))
    return times, vectors


async def _timed_batch(embedder: MemoryEmbedder, texts: Sequence[str]) -> tuple[float, list[list[float]]]:
    started = time.perf_counter()
    vectors = await embedder.embed_documents(texts)
    return (time.perf_counter() - started) * 1000, [list(v) for v in vectors]


async def _run(questions: list[str], source: str, round_size: int, batches: int, cache_dir: Path) -> None:
    started = time.perf_counter()
    model = local.load_sentence_transformer()
    load_seconds = time.perf_counter() - started
    _, export_seconds = export_graph(local.model_dir(), cache_dir, load_model=lambda: model)
    started = time.perf_counter()
    open_encoder(local.model_dir(), cache_dir, threads=local.LOCAL_THREADS)
    open_seconds = time.perf_counter() - started

    runtimes = {"torch": local_embedder(runtime="torch"), "onnx": local_embedder(runtime="onnx", cache_dir=cache_dir)}
    for embedder in runtimes.values():  # warm-up: thread pool, allocator, the encoder
        for i in range(5):
            await embedder.embed_query(f"warm-up question number {i}?")
        await embedder.embed_documents([f"warm-up fact {i}" for i in range(8)])
    if getattr(runtimes["onnx"].embedder.model, "query_runtime", None) != "onnx":
        raise SystemExit("onnxruntime could not be used (see the warning above)")

    facts = _facts(questions, batches)
    times: dict[str, list[float]] = {name: [] for name in runtimes}
    batch_times: dict[str, list[float]] = {name: [] for name in runtimes}
    vectors: dict[str, list[list[float]]] = {name: [] for name in runtimes}
    fact_vectors: dict[str, list[list[float]]] = {name: [] for name in runtimes}
    rounds = max(len(range(0, len(questions), round_size)), len(facts))
    for r in range(rounds):
        chunk = questions[r * round_size : (r + 1) * round_size]
        order = list(runtimes) if r % 2 == 0 else list(reversed(runtimes))
        for name in order:
            t, v = await _timed_questions(runtimes[name], chunk)
            times[name].extend(t)
            vectors[name].extend(v)
            if r < len(facts):
                ms, fv = await _timed_batch(runtimes[name], facts[r])
                batch_times[name].append(ms)
                fact_vectors[name].extend(fv)

    threads = local.LOCAL_THREADS
    print(f"## Offline embedding: torch vs onnxruntime ({len(questions)} questions, {source}; {len(facts)} batches")
    print("of 64 facts, one in eight past 256 tokens)\n")
    print(f"one thread each (`MEMORY_LOCAL_EMBEDDING_THREADS`={threads});")
    print("interleaved rounds, order swapped each round; `MemoryEmbedder` as `search` and `remember` call it.\n")
    print("| runtime | question p50 ms | question p95 ms | batch of 64 facts p50 ms | batch p95 ms |")
    print("|---|---:|---:|---:|---:|")
    for name, label in (("torch", "torch eager"), ("onnx", "onnxruntime")):
        t, b = times[name], batch_times[name]
        print(
            f"| {label} | {percentile(t, 0.50):.2f} | {percentile(t, 0.95):.2f} |"
            f" {percentile(b, 0.50):.1f} | {percentile(b, 0.95):.1f} |"
        )
    speedup = percentile(times["torch"], 0.50) / percentile(times["onnx"], 0.50)
    batch_speedup = percentile(batch_times["torch"], 0.50) / percentile(batch_times["onnx"], 0.50)
    print(f"\np50 speed-up: questions {speedup:.2f}x, batches {batch_speedup:.2f}x\n")
    print("| one-off cost / agreement | value |\n|---|---:|")
    print(f"| load the torch model | {load_seconds:.2f} s |")
    print(f"| ONNX export (torch.onnx.export) | {export_seconds:.2f} s |")
    print(f"| open the cached graph (checked on probes) | {open_seconds:.2f} s |")
    print(f"| min cosine, onnx vs torch question vectors | {_min_cosine(vectors['onnx'], vectors['torch']):.6f} |")
    print(f"| min cosine, onnx vs torch fact vectors (batches) | "
          f"{_min_cosine(fact_vectors['onnx'], fact_vectors['torch']):.6f} |")  # fmt: skip


# The search question's path (`--question-path`).

SQL_AFTER = "select count(*) from generate_series(1, 15000) g where g % 7 = 3"
"""A query that costs the server a few ms of CPU, standing in for the search's SQL after the embedding."""

THREAD_VARIANTS: dict[str, tuple[int, dict[str, str]]] = {
    "1 thread (the default)": (1, {}),
    "2 threads, spinning (onnxruntime's default)": (2, {}),
    "2 threads, spinning stopped after each run": (2, {"session.force_spinning_stop": "1"}),
    "2 threads, no spinning": (2, {"session.intra_op.allow_spinning": "0"}),
}


def _encoder_with(base: OnnxEncoder, threads: int, config: dict[str, str]) -> OnnxEncoder:
    """`base`'s graph in a session of `threads` intra-op threads and extra session `config` entries."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    run = mapped_graph(base.path) if mapped_graph(base.path).exists() else base.path
    return OnnxEncoder(base.pipeline, ort.InferenceSession(str(run), options, providers=["CPUExecutionProvider"]), run)


def _question_embedder(encoder: OnnxEncoder, key: str) -> MemoryEmbedder:
    """The library's offline embedder (`local_embedder`), on `encoder`: the process keeps one encoder per cache
    directory (`local.onnx_encoder`), so each variant gets one under a directory name of its own."""
    local._encoders[Path(key)] = encoder
    embedder = local_embedder(runtime="onnx", cache_dir=Path(key))
    embedder._cache_size = 0  # every call embeds
    return embedder


async def _run_question_path(questions: list[str], cache_dir: Path, database: str | None, threads_rounds: int) -> None:
    encoder = local.onnx_encoder(cache_dir)
    if encoder is None:
        raise SystemExit("onnxruntime could not be used (see the warning above)")
    memory = _question_embedder(encoder, "one thread")
    model = memory._direct
    assert isinstance(model, local.OfflineMiniLM)
    session = encoder.session

    def run_only(text: str) -> None:
        ids = np.array([encoder._tokenizer.encode(text.strip()).ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        session.run(None, {name: feeds[name] for name in encoder.input_names})

    async def previous(text: str) -> list[tuple[float, ...]]:
        return await memory.embed_documents([text])

    Step = Callable[[str], Awaitable[object] | object]
    steps: dict[str, Step] = {
        "previous path: `embed_documents([q])` (batch of one, thread, 2 conversions)": previous,
        "`MemoryEmbedder.embed_query` (the searcher's call)": memory.embed_query,
        "the same on the event loop (`embed_query_sync`; not used)": model.embed_query_sync,
        "`OnnxEncoder.encode([q])` (batch path)": lambda q: encoder.encode([q]),
        "`OnnxEncoder.encode_one(q)`": encoder.encode_one,
        "`session.run` alone (the model's arithmetic)": run_only,
    }
    same = 0
    for question in questions:
        same += [await memory.embed_query(question)] == await previous(question)
    same_one = sum(np.array_equal(encoder.encode_one(q), encoder.encode([q])[0]) for q in questions)
    for step in steps.values():  # warm-up: executor thread, allocator, first runs
        for i in range(5):
            await _call(step, f"warm-up question number {i}?")

    conn = None
    if database is not None:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(database, autocommit=True)
    what = "embedding, then a few ms of SQL on an embedded PostgreSQL" if conn is not None else "embedding alone"
    print(f"## The search question's embedding ({len(questions)} LoCoMo dev questions, {what})\n")
    print("Interleaved per question, order shuffled; CPU: this process's (all its threads) per call.\n")
    try:
        wall: dict[str, list[float]] = {name: [] for name in steps}
        cpu: dict[str, list[float]] = {name: [] for name in steps}
        for n, question in enumerate(questions):
            order = list(steps)
            random.Random(n).shuffle(order)
            for name in order:
                c0, t0 = time.process_time(), time.perf_counter()
                await _call(steps[name], question)
                if conn is not None:
                    await conn.execute(SQL_AFTER)
                wall[name].append((time.perf_counter() - t0) * 1000)
                cpu[name].append((time.process_time() - c0) * 1000)
        _print_steps(wall, cpu)
        if threads_rounds:
            await _thread_variants(questions, cache_dir, database, threads_rounds)
    finally:
        if conn is not None:
            await conn.close()
    print(f"`embed_query` bitwise equal to the previous path: {same} of {len(questions)} questions;")
    print(f"`encode_one` bitwise equal to `encode([q])`: {same_one} of {len(questions)}.")


def _print_steps(wall: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    print("| step | wall p50 ms | wall p95 ms | CPU ms per call |\n|---|---:|---:|---:|")
    for name in wall:
        print(
            f"| {name} | {percentile(wall[name], 0.50):.2f} | {percentile(wall[name], 0.95):.2f} |"
            f" {sum(cpu[name]) / len(cpu[name]):.2f} |"
        )
    print()


async def _thread_variants(questions: list[str], cache_dir: Path, database: str | None, rounds: int) -> None:
    """`embed_query` on sessions of 1 or 2 intra-op threads, each in a process of its own (in one process, a
    session's threads still spinning after its run would be charged to the next step), the processes alternating:
    `rounds` rounds, each a slice of the questions per variant, the order shuffled each round."""
    wall: dict[str, list[float]] = {name: [] for name in THREAD_VARIANTS}
    cpu: dict[str, list[float]] = {name: [] for name in THREAD_VARIANTS}
    size = max(1, len(questions) // rounds)
    for r in range(rounds):
        order = list(THREAD_VARIANTS)
        random.Random(r).shuffle(order)
        for name in order:
            worker = [sys.executable, "-m", "bench.embedding_latency", "--thread-worker", name, "--cache-dir"]
            worker += [str(cache_dir), "--offset", str(r * size), "--calls", str(size)]
            if database is not None:
                worker += ["--database-url", database]
            done = await asyncio.create_subprocess_exec(*worker, stdout=asyncio.subprocess.PIPE)
            out, _ = await done.communicate()
            if done.returncode != 0:
                raise SystemExit(f"thread worker {name!r} failed")
            result = json.loads(out.decode().splitlines()[-1])
            wall[name].extend(result["wall"])
            cpu[name].extend(result["cpu"])
    print(f"`embed_query` by intra-op threads: {rounds} rounds of alternating processes, {size} questions each.\n")
    _print_steps(wall, cpu)


async def _thread_worker(name: str, questions: list[str], cache_dir: Path, database: str | None) -> None:
    encoder = local.onnx_encoder(cache_dir)
    if encoder is None:
        raise SystemExit("onnxruntime could not be used")
    threads, config = THREAD_VARIANTS[name]
    memory = _question_embedder(encoder if threads == 1 else _encoder_with(encoder, threads, config), name)
    for i in range(10):
        await memory.embed_query(f"warm-up question number {i}?")
    conn = None
    if database is not None:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(database, autocommit=True)
        await conn.execute(SQL_AFTER)
    wall, cpu = [], []
    for question in questions:
        c0, t0 = time.process_time(), time.perf_counter()
        await memory.embed_query(question)
        if conn is not None:
            await conn.execute(SQL_AFTER)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    if conn is not None:
        await conn.close()
    print(json.dumps({"wall": wall, "cpu": cpu}))


async def _call(step: Callable[[str], Awaitable[object] | object], text: str) -> None:
    result = step(text)
    if inspect.isawaitable(result):
        await result


async def _question_path_main(questions: list[str], cache_dir: Path, with_database: bool, rounds: int) -> None:
    if not with_database:
        await _run_question_path(questions, cache_dir, None, rounds)
        return
    from bench.embedded import migrated

    async with migrated(os.environ.get("MEMORY_DATABASE_URL"), prefix="embedding-latency-") as url:
        await _run_question_path(questions, cache_dir, url, rounds)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=Path, default=LOCOMO_QUESTIONS)
    ap.add_argument("--calls", type=int, default=400, help="questions per runtime")
    ap.add_argument("--round", type=int, default=20, help="questions per interleaved round")
    ap.add_argument("--batches", type=int, default=10, help="batches of 64 facts per runtime")
    ap.add_argument("--cache-dir", type=Path, default=None, help="ONNX cache (default: a fresh temporary one)")
    ap.add_argument("--question-path", action="store_true", help="the search question's path, step by step")
    ap.add_argument("--database", action="store_true", help="with --question-path: SQL after each embedding")
    ap.add_argument("--thread-rounds", type=int, default=4, help="with --question-path: 0 skips the threads table")
    ap.add_argument("--thread-worker", choices=list(THREAD_VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--database-url", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not local_available():
        print("the [local] extra is not installed: nothing to measure")
        return 1
    cache = args.cache_dir or MemorySettings().data_dir / "onnx"
    if args.thread_worker:
        questions = _questions(args.questions, args.offset + args.calls)[0][args.offset :]
        asyncio.run(_thread_worker(args.thread_worker, questions, cache, args.database_url))
        return 0
    questions, source = _questions(args.questions, args.calls)
    if args.question_path:
        asyncio.run(_question_path_main(questions, cache, args.database, max(0, args.thread_rounds)))
        return 0
    with tempfile.TemporaryDirectory(prefix="embedding-latency-") as tmp:
        cache = args.cache_dir or Path(tmp)
        asyncio.run(_run(questions, source, max(1, args.round), max(1, args.batches), cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
