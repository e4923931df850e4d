"""Query embedding latency of the offline model, torch against onnxruntime, side by side in one run.

    python -m bench.embedding_latency [--questions PATH] [--calls 400] [--round 20] [--cache-dir DIR]

Each question goes through `MemoryEmbedder.embed_query` (what every `search` pays: tokenizer, forward pass,
pooling, the thread hop) of two local embedders, one per runtime (`MEMORY_LOCAL_EMBEDDING_RUNTIME`), on one
thread each (`MEMORY_LOCAL_EMBEDDING_THREADS`, default 1). The runs are interleaved in rounds of `--round`
questions, the order swapped every round, so that a change of load on the machine hits both alike. Every
question is distinct, so the embedders' query caches never answer. Questions: LoCoMo's development split
(`../shared/bench/locomo/questions_dev.jsonl`) when present, else synthetic ones.

Also reported: the ONNX export time (into a fresh temporary cache unless `--cache-dir`), the load time of an
already cached graph, and the minimum cosine similarity between the two runtimes' vectors over all questions,
and between the ONNX question vectors and the same texts embedded as facts (torch, in batches). Prints
markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.tables import percentile
from memory_plugin.embeddings import MemoryEmbedder, local_available, local_embedder, minilm
from memory_plugin.embeddings.onnx_query import OnnxQueryEncoder, load_query_encoder

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


async def _timed(embedder: MemoryEmbedder, texts: Sequence[str]) -> tuple[list[float], list[list[float]]]:
    times, vectors = [], []
    for text in texts:
        started = time.perf_counter()
        vector = await embedder.embed_query(text)
        times.append((time.perf_counter() - started) * 1000)
        vectors.append(list(vector))
    return times, vectors


async def _run(questions: list[str], source: str, round_size: int, cache_dir: Path) -> None:
    started = time.perf_counter()
    model = minilm._load_local()
    load_seconds = time.perf_counter() - started

    def reference(text: str) -> list[float]:
        return minilm._encode_one(model, text, True)

    def load() -> tuple[OnnxQueryEncoder, float]:
        started = time.perf_counter()
        encoder = load_query_encoder(
            model, model_dir=minilm._model_dir(), cache_dir=cache_dir, reference=reference,
            threads=minilm.LOCAL_TORCH_THREADS,
        )  # fmt: skip
        return encoder, time.perf_counter() - started

    fresh, first_seconds = load()  # exports, unless --cache-dir already holds the file
    _, cached_seconds = load()  # reads the file just written

    runtimes = {"torch": local_embedder(runtime="torch"), "onnx": local_embedder(runtime="onnx", cache_dir=cache_dir)}
    for embedder in runtimes.values():  # warm-up: thread pool, allocator, the encoder's memo
        for i in range(5):
            await embedder.embed_query(f"warm-up question number {i}?")
    if getattr(runtimes["onnx"].embedder.model, "query_runtime", None) != "onnx":
        raise SystemExit("onnxruntime could not be used (see the warning above)")

    times: dict[str, list[float]] = {name: [] for name in runtimes}
    vectors: dict[str, list[list[float]]] = {name: [] for name in runtimes}
    for r, start in enumerate(range(0, len(questions), round_size)):
        chunk = questions[start : start + round_size]
        order = list(runtimes) if r % 2 == 0 else list(reversed(runtimes))
        for name in order:
            t, v = await _timed(runtimes[name], chunk)
            times[name].extend(t)
            vectors[name].extend(v)
    as_facts = await runtimes["torch"].embed_documents(questions)

    print(f"## Query embedding: torch vs onnxruntime ({len(questions)} questions, {source})\n")
    print(f"one thread each (`MEMORY_LOCAL_EMBEDDING_THREADS`={minilm.LOCAL_TORCH_THREADS}); rounds of {round_size},")
    print("order swapped each round; `MemoryEmbedder.embed_query` as `search` calls it.\n")
    print("| runtime | p50 ms | p95 ms | mean ms | max ms |\n|---|---:|---:|---:|---:|")
    for name, label in (("torch", "torch eager"), ("onnx", "onnxruntime (`ORT_ENABLE_ALL`)")):
        t = times[name]
        p50, p95 = percentile(t, 0.50), percentile(t, 0.95)
        print(f"| {label} | {p50:.2f} | {p95:.2f} | {sum(t) / len(t):.2f} | {max(t):.2f} |")
    speedup = percentile(times["torch"], 0.50) / percentile(times["onnx"], 0.50)
    print(f"\np50 speed-up: {speedup:.2f}x\n")
    print("| one-off cost / agreement | value |\n|---|---:|")
    print(f"| load the torch model | {load_seconds:.2f} s |")
    print(f"| ONNX export (torch.onnx.export) | {fresh.export_seconds:.2f} s |")
    print(f"| first ONNX load: key, export, session, check on probes | {first_seconds:.2f} s |")
    print(f"| later ONNX load (cached file, checked on probes) | {cached_seconds:.2f} s |")
    print(f"| min cosine, onnx vs torch question vectors | {_min_cosine(vectors['onnx'], vectors['torch']):.6f} |")
    print(f"| min cosine, onnx question vs the same text as a fact (torch batch) | "
          f"{_min_cosine(vectors['onnx'], as_facts):.6f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=Path, default=LOCOMO_QUESTIONS)
    ap.add_argument("--calls", type=int, default=400, help="questions per runtime")
    ap.add_argument("--round", type=int, default=20, help="questions per interleaved round")
    ap.add_argument("--cache-dir", type=Path, default=None, help="ONNX cache (default: a fresh temporary one)")
    args = ap.parse_args(argv)
    if not local_available():
        print("the [local] extra is not installed: nothing to measure")
        return 1
    questions, source = _questions(args.questions, args.calls)
    with tempfile.TemporaryDirectory(prefix="embedding-latency-") as tmp:
        asyncio.run(_run(questions, source, max(1, args.round), args.cache_dir or Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
