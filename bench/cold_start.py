"""Cold start with the offline model: how long a fresh process waits for its first vector, its first search and,
after `serve`, its first REST request, for two checkouts side by side (e.g. the previous version and this one).

    python -m bench.cold_start [--repeat 5] [--before DIR] [--after DIR] [--python PATH] [--no-rest]

Per checkout: its own embedded PostgreSQL in a temporary data directory (started once by `db-url` and left
running, so that the measurements are the process's own start, not the server's), `MEMORY_EMBEDDING_MODEL=local`,
`HF_HUB_OFFLINE=1`, no OpenAI key. An untimed warm-up process of each checkout first embeds once, so whatever it
caches on disk (the ONNX graph) is there, as it is on any machine after the first run, and writes a few facts.

- first vector: a new interpreter, from `Popen` to `embed_query` returning (`default_embedder`, as the manager
  builds it), in wall time and in the process's CPU time (user + system: what the load of a shared machine
  changes least); also whether torch was imported;
- first search: a new interpreter, from `Popen` to `MemoryManager.search` returning (open, connect, embed the
  question, search);
- first REST request: `memory-plugin serve` started, then, as soon as its port accepts, one
  `GET /api/chats?search=…` with a valid token: the time from the port's opening to the answer, and from `Popen`.

The runs of the two checkouts alternate, so a change of load on the machine hits both alike; each cell is the
median of `--repeat` runs. Prints markdown. `--vector-only` measures the first vector alone (no server).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["main"]

USER = "5f0c7a1e-0000-4000-8000-00000000c01d"
QUESTION = "Which material does the customer prefer for the brackets?"
SECRET = "cold-start-bench-secret-0123456789abcdef"
CLI = "import sys; from memory_plugin.cli import app; sys.argv[0] = 'memory-plugin'; app()"
"""`memory-plugin …` of the checkout on PYTHONPATH (a module or a package: `-m memory_plugin.cli` needs one)."""

FIRST_VECTOR = f"""
import asyncio, json, sys, time
from memory_plugin import MemorySettings
from memory_plugin.embeddings import default_embedder

embedder = default_embedder(MemorySettings())
asyncio.run(embedder.embed_query({QUESTION!r}))
print(json.dumps({{"done": time.time(), "torch": "torch" in sys.modules}}))
"""

FIRST_SEARCH = f"""
import asyncio, json, time
from uuid import UUID
from memory_plugin import MemoryManager, MemorySettings

async def main():
    async with MemoryManager.open(MemorySettings()) as memory:
        hits = await memory.search(UUID({USER!r}), {QUESTION!r})
        return time.time(), len(hits)

done, hits = asyncio.run(main())
print(json.dumps({{"done": done, "hits": hits}}))
"""

SEED = f"""
import asyncio
from uuid import UUID
from memory_plugin import MemoryManager, MemorySettings

async def main():
    async with MemoryManager.open(MemorySettings()) as memory:
        for text in ("Prefers 7075 aluminium for the brackets", "Ships to Bilbao on Fridays", "Needs EN certificates"):
            await memory.remember(UUID({USER!r}), text)

asyncio.run(main())
"""


@dataclass
class Checkout:
    """One checkout's environment and its measurements (seconds)."""

    label: str
    source: Path
    data_dir: Path
    env: dict[str, str]
    times: dict[str, list[float]] = field(default_factory=dict)
    torch: list[bool] = field(default_factory=list)

    def add(self, key: str, seconds: float) -> None:
        self.times.setdefault(key, []).append(seconds)


def _checkout(label: str, source: Path) -> Checkout:
    # Short: the server's unix socket path lives under it (at most 107 bytes).
    data_dir = Path(tempfile.mkdtemp(prefix=f"mpcold-{label[:6]}-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_") and k != "OPENAI_API_KEY"}
    env.update(
        PYTHONPATH=str(source),
        MEMORY_DATA_DIR=str(data_dir),
        MEMORY_EMBEDDING_MODEL="local",
        MEMORY_JWT_SECRET=SECRET,
        HF_HUB_OFFLINE="1",
    )
    return Checkout(label, source, data_dir, env)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _spawn_until_done(python: str, code: str, c: Checkout) -> tuple[float, dict[str, object]]:
    """Seconds from `Popen` to the child's `done` timestamp, and the child's printed result with its CPU seconds
    (`cpu`, the whole process: it exits right after printing)."""
    cpu_before = _children_cpu()
    started = time.time()
    done = subprocess.run([python, "-c", code], env=c.env, cwd=c.data_dir, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{c.label}: {done.stderr.strip()[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu"] = _children_cpu() - cpu_before
    return float(result["done"]) - started, result  # type: ignore[arg-type]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _token() -> str:
    import jwt

    now = int(time.time())
    claims = {"sub": USER, "role": "authenticated", "aud": "authenticated", "iat": now, "exp": now + 600}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def _first_rest(python: str, c: Checkout) -> tuple[float, float]:
    """Seconds from the port accepting to the first answer, and from `Popen` to it."""
    port = _free_port()
    started = time.time()
    server = subprocess.Popen(
        [python, "-c", CLI, "serve", "--port", str(port)],
        env=c.env,
        cwd=c.data_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = started + 600
        while True:
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{c.label}: serve exited ({server.returncode}) or never listened")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        listening = time.time()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/chats?search=aluminium", headers={"Authorization": f"Bearer {_token()}"}
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            response.read()
        answered = time.time()
        return answered - listening, answered - started
    finally:
        server.terminate()  # the server this function started, by its own handle
        server.wait(timeout=60)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "–"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    here = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--before", type=Path, default=Path("/work/base"), help="the previous version's checkout")
    ap.add_argument("--after", type=Path, default=here, help="the checkout to compare (default: this one)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--no-rest", action="store_true", help="skip the REST measurement")
    ap.add_argument("--vector-only", action="store_true", help="measure the first vector only (no server)")
    args = ap.parse_args(argv)
    checkouts = [_checkout("before", args.before.resolve()), _checkout("after", args.after.resolve())]
    started_load = os.getloadavg()[0]
    cli = [args.python, "-c", CLI]
    try:
        for c in checkouts:
            if not args.vector_only:
                start = [*cli, "db-url"]
                subprocess.run(start, env=c.env, cwd=c.data_dir, capture_output=True, check=True, timeout=300)
            _spawn_until_done(args.python, FIRST_VECTOR, c)  # warm-up: exports whatever it caches
            if not args.vector_only:
                subprocess.run([args.python, "-c", SEED], env=c.env, cwd=c.data_dir, check=True, timeout=600)
        for r in range(args.repeat):
            for c in checkouts if r % 2 == 0 else reversed(checkouts):
                seconds, result = _spawn_until_done(args.python, FIRST_VECTOR, c)
                c.add("vector", seconds)
                c.add("vector_cpu", float(result["cpu"]))  # type: ignore[arg-type]
                c.torch.append(bool(result["torch"]))
                if args.vector_only:
                    continue
                search_seconds, search = _spawn_until_done(args.python, FIRST_SEARCH, c)
                c.add("search", search_seconds)
                c.add("search_cpu", float(search["cpu"]))  # type: ignore[arg-type]
                if not args.no_rest:
                    after_listen, after_popen = _first_rest(args.python, c)
                    c.add("rest", after_listen)
                    c.add("rest_total", after_popen)
    finally:
        for c in checkouts:
            if not args.vector_only:
                subprocess.run([*cli, "stop"], env=c.env, cwd=c.data_dir, capture_output=True, timeout=120)
            shutil.rmtree(c.data_dir, ignore_errors=True)
    load = f"load {started_load:.1f} → {os.getloadavg()[0]:.1f}"
    print(f"## Cold start, offline model (median of {args.repeat}, {load}, {os.cpu_count()} CPUs)\n")
    print("| fresh process | " + " | ".join(f"{c.label} (`{c.source}`) s" for c in checkouts) + " |")
    print("|---|" + "---:|" * len(checkouts))
    rows = [
        ("vector", "first vector (`Popen` → `embed_query` returns)"),
        ("vector_cpu", "first vector, CPU time of the process (user + system)"),
        ("search", "first search (`Popen` → `MemoryManager.search` returns)"),
        ("search_cpu", "first search, CPU time of the process (user + system)"),
        ("rest", "first REST request after `serve` (port open → answer)"),
        ("rest_total", "`serve` to first REST answer (`Popen` → answer)"),
    ]
    for key, label in rows:
        if any(key in c.times for c in checkouts):
            print(f"| {label} | " + " | ".join(_median(c.times.get(key, [])) for c in checkouts) + " |")
    print("| torch imported by the first vector | " + " | ".join(str(any(c.torch)).lower() for c in checkouts) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
