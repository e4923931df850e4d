"""`python -m bench.write_scaling --quick` runs end to end and prints its four tables. Timings are never asserted."""

from __future__ import annotations

import re

import pytest

from bench.write_scaling import QUICK, main


@pytest.mark.slow
def test_write_scaling_quick_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    headings = [line.split(" ")[1] for line in out.splitlines() if line.startswith("### ")]
    assert headings == ["(a)", "(b)", "(c)", "(d)"]
    for n in QUICK.fact_counts:
        assert re.search(rf"^\| {n:,} +\| +update_memory \|", out, re.M), n
    # (b): every fact of the acceptance write is stored (a few reinforce a near-duplicate), none journaled.
    row = re.search(r"^\| 3 +\| +(\d[\d,]*) \| +(\d+) \|", out, re.M)
    assert row is not None
    assert QUICK.acceptance_facts * 0.98 <= int(row[1].replace(",", "")) <= QUICK.acceptance_facts
    assert row[2] == "0"
    # (c): the near-duplicate probe reads the word-key index.
    assert "user_memory_fact_words_idx" in out
    # (d): the same writes with the offline embedder on, one row per size.
    embedded = out.split("### (d)", 1)[1]
    assert len(re.findall(r"^\| [\d,]+ +\| +update_memory \|", embedded, re.M)) >= 1
