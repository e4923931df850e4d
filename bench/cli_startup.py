"""Start-up time of the CLI's quick commands: `status`, `inspect`, `db-url`, `stop`, and of `import memory_plugin.cli`.

    python -m bench.cli_startup [--repeat 5] [--source DIR] [--python PATH]

Each command runs as a user runs it (`python -m memory_plugin.cli ...`, a fresh interpreter each time) on an
embedded PostgreSQL in a temporary data directory, removed at the end; `MEMORY_DATABASE_URL` is unset and
`HF_HUB_OFFLINE=1`, the embedding model setting as configured (default `auto`). Two states of the server:
- running: `db-url` started it first (it stays up until `stop`), so a command only connects;
- cold: no server, so `status` and `inspect` start PostgreSQL themselves (and stop it when they exit).
`stop` is timed on a running server (restarted by an untimed `db-url` before each run).

Wall time and CPU time (user + system of the command's process and the children it waited for; the server's
own processes are not counted) are the median of `--repeat` runs. The machine's other load moves the wall
time; CPU time is the steadier of the two. `--source DIR` measures another checkout (e.g. a worktree of the
previous version): it goes first on PYTHONPATH. Also reports which heavy libraries `import memory_plugin.cli`
loads. Prints markdown.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HEAVY_MODULES", "Timing", "main", "measure"]

HEAVY_MODULES = ("pydantic_ai", "torch", "sentence_transformers", "fastapi", "uvicorn")
"""Libraries a quick command has no use for: each costs 0.1–1 s (pydantic_ai 1.1 s) to import."""

USER = "5f0c7a1e-0000-4000-8000-00000000de70"


@dataclass(frozen=True, slots=True)
class Timing:
    """Median wall and CPU seconds of one command line."""

    label: str
    wall: float
    cpu: float


def _env(source: Path, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MEMORY_DATABASE_URL", "MEMORY_ADMIN_DATABASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["MEMORY_DATA_DIR"] = str(data_dir)
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _timed(argv: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(
    label: str, argv: Sequence[str], env: dict[str, str], cwd: Path, repeat: int, before_each: Sequence[str] = ()
) -> Timing:
    """Median wall and CPU time of `argv` over `repeat` runs, `before_each` (untimed) run before every one."""
    walls, cpus = [], []
    for _ in range(repeat):
        if before_each:
            subprocess.run(before_each, env=env, cwd=cwd, capture_output=True, check=True, timeout=120)
        wall, cpu = _timed(argv, env, cwd)
        walls.append(wall)
        cpus.append(cpu)
    return Timing(label, statistics.median(walls), statistics.median(cpus))


def _heavy_imports(python: str, env: dict[str, str], cwd: Path) -> list[str]:
    code = f"import sys, memory_plugin.cli; print(' '.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    out = subprocess.run([python, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.split()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    source: Path = args.source.resolve()
    # Short: the server's unix socket path lives under it (at most 107 bytes).
    data_dir = Path(tempfile.mkdtemp(prefix="mpcli-"))
    env = _env(source, data_dir)
    cli = [args.python, "-m", "memory_plugin.cli"]
    run = (data_dir, args.repeat)
    try:
        heavy = _heavy_imports(args.python, env, data_dir)
        timings = [measure("import memory_plugin.cli", [args.python, "-c", "import memory_plugin.cli"], env, *run)]
        timings.append(measure("status (cold)", [*cli, "status"], env, *run))
        timings.append(measure("inspect --user (cold)", [*cli, "inspect", "--user", USER], env, *run))
        subprocess.run([*cli, "db-url"], env=env, cwd=data_dir, capture_output=True, check=True, timeout=120)
        timings.append(measure("status (running)", [*cli, "status"], env, *run))
        timings.append(measure("inspect --user (running)", [*cli, "inspect", "--user", USER], env, *run))
        timings.append(measure("db-url (running)", [*cli, "db-url"], env, *run))
        timings.append(measure("stop (running)", [*cli, "stop"], env, *run, before_each=[*cli, "db-url"]))
    finally:
        subprocess.run([*cli, "stop"], env=env, cwd=data_dir, capture_output=True, timeout=120)
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"## CLI start-up ({source.name}, median of {args.repeat}, load {os.getloadavg()[0]:.1f})\n")
    print("| command | wall s | cpu s |")
    print("|---|---:|---:|")
    for t in timings:
        print(f"| `{t.label}` | {t.wall:.2f} | {t.cpu:.2f} |")
    checked = ", ".join(HEAVY_MODULES)
    print(f"\nheavy libraries `import memory_plugin.cli` loads: {', '.join(heavy) or 'none'} (of {checked})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
