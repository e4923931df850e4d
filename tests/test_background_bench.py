"""bench/background.py runs and prints its two tables (no timing is asserted)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest


@pytest.mark.slow
def test_background_bench_prints_turn_latency_and_drain_rate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import background

    private = Path(tempfile.mkdtemp(prefix="mpb-"))  # short: the server's socket path must stay valid
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    args = [
        "--turns",
        "4",
        "--extraction-seconds",
        "0.2",
        "--inline-turns",
        "1",
        "--jobs",
        "8",
        "--job-seconds",
        "0.01",
    ]
    assert background.main([*args, "--workers", "1,2"]) == 0
    out = capsys.readouterr().out
    turns = dict(re.findall(r"^\| (none|background|inline) \| \d+ \| ([\d.]+) \|", out, re.M))
    assert set(turns) == {"none", "background", "inline"}
    rates = dict(re.findall(r"^\| (\d) \| ([\d.]+) \|", out, re.M))
    assert set(rates) == {"1", "2"}
    assert all(float(rate) > 0 for rate in rates.values())
