"""`scripts/bootstrap` says what it does, a line per step, and nothing about steps already done. Run against a
stand-in Python (a script recording its arguments), so no package is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]

# Stands in for python3 and .venv/bin/python: `-m venv DIR` makes DIR/bin/python (itself); anything else
# (pip, the graph export) succeeds silently.
FAKE_PYTHON = """#!/usr/bin/env bash
if [[ $1 == -m && $2 == venv ]]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
exit 0
"""


def _bootstrap(checkout: Path, python: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(python)}
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "bootstrap")], cwd=checkout, env=env, capture_output=True, text=True
    )


def test_bootstrap_prints_a_line_per_step_and_none_when_nothing_changes(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap", checkout / "scripts" / "bootstrap")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)

    first = _bootstrap(checkout, python)
    assert first.returncode == 0, first.stderr
    steps = [line for line in first.stderr.splitlines() if line.startswith("bootstrap: ")]
    for what in ("virtualenv", "torch", "the package"):
        assert any(what in line for line in steps), (what, first.stderr)

    again = _bootstrap(checkout, python)
    assert again.returncode == 0, again.stderr
    assert "bootstrap: " not in again.stderr  # idempotent and quiet: nothing to do, nothing said
