"""The benchmarks run end to end in quick mode and print the expected tables. Timings are never asserted."""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

from bench.run import QUICK, bench_add_message, bench_context, bench_session_memory, main, render, to_markdown


@pytest.mark.slow
async def test_add_message_bench_reports_both_paths() -> None:
    table = await bench_add_message(QUICK)
    assert table.row_labels() == ["MemoryManager.add_message (awaited)", "SessionStore.add_message (raw)"]
    manager, raw = table.rows
    assert manager[1] == f"{QUICK.messages:,}"
    assert manager[2] == f"{QUICK.sessions:,}"
    assert manager[6] == "≥ 100,000/s"
    assert manager[7] in ("✅ met", "❌ missed")
    assert raw[6] == "—"
    for row in table.rows:
        assert float(row[4].replace(",", "")) > 0


@pytest.mark.slow
def test_session_memory_bench_reports_bytes_per_session() -> None:
    table = bench_session_memory(QUICK)
    assert table.row_labels() == [
        "session state (index entry, id, window, entities, intent)",
        "2 Message objects",
        "total per live session",
    ]
    state, messages, total = (int(row[1].replace(",", "")) for row in table.rows)
    assert state > 0
    assert messages > 0
    assert abs(total - (state + messages)) <= 1  # each cell is rounded separately


def _bench_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("memory-plugin-bench-*"))


@pytest.mark.slow
async def test_context_bench_on_its_own_embedded_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    # A private temp root: other test runs on the machine (other worktrees) create and remove their own
    # bench directories under the shared /tmp at any time. Short, so the server's socket path stays valid.
    private = Path(tempfile.mkdtemp(prefix="mpb-"))
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    before = _bench_dirs()
    latency, explain, rls, writes = await bench_context(QUICK)
    assert latency.row_labels() == [f"{n:,} facts" for n in QUICK.fact_counts]
    assert [row[2] for row in latency.rows] == [f"{QUICK.timed_calls:,}"] * len(QUICK.fact_counts)
    assert latency.rows[-1][8] == "p95 ≤ 5 ms"
    assert latency.rows[0][8] == "—"
    for row in latency.rows:
        p50, p95, p99 = (float(x) for x in row[3:6])
        assert 0 < p50 <= p95 <= p99
    assert explain.row_labels() == [
        "planning time",
        "execution time",
        "shared buffers hit",
        "shared buffers read",
        "rows returned",
    ]
    assert explain.rows[4][1] == "23"  # 12 facts, 5 preferences, 3 projects, 3 patterns
    assert any("user_memory" in line for line in explain.code)
    assert rls.row_labels() == ["as the user (set role + JWT claims, RLS)", "as the pool's role", "difference"]
    assert all(float(row[2]) > 0 for row in rls.rows[:2])
    assert writes.row_labels()[0] == "1,000 new facts, one update_memory call"
    assert [row[1] for row in writes.rows] == ["1", "1", "1,000"]
    # The temporary cluster is removed afterwards.
    assert _bench_dirs() == before
    monkeypatch.undo()
    os.rmdir(private)  # empty: the bench removed what it created


@pytest.mark.slow
async def test_tables_render_as_markdown() -> None:
    table = await bench_add_message(QUICK)
    text = to_markdown(table)
    lines = text.splitlines()
    assert lines[0].startswith("### (a) add_message throughput")
    assert re.fullmatch(r"\|[-:|]+\|", lines[3])
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:3] + lines[4:6])
    out = io.StringIO()
    render([table], Console(file=out, width=240))
    assert "MemoryManager.add_message (awaited)" in out.getvalue()


@pytest.mark.slow
def test_main_quick_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    headings = [line for line in out.splitlines() if line.startswith("### ")]
    assert [h.split(" ")[1] for h in headings] == ["(a)", "(b)", "EXPLAIN", "(c)", "(d)", "(e)", "(f)"]
    for label in (
        "MemoryManager.add_message (awaited)",
        "SessionStore.add_message (raw)",
        *(f"{n:,} facts" for n in QUICK.fact_counts),
        "execution time",
        "total per live session",
        "as the user (set role + JWT claims, RLS)",
        "1,000 new facts, one update_memory call",
        "model calls per user turn",
    ):
        assert re.search(rf"^\| {re.escape(label)} +\|", out, re.M), label


@pytest.mark.slow
def test_cli_startup_bench_times_each_quick_command_and_removes_its_server(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import cli_startup

    private = Path(tempfile.mkdtemp(prefix="mpc-"))  # its own temp root: other runs share /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    assert cli_startup.main(["--repeat", "1"]) == 0
    out = capsys.readouterr().out
    rows = dict(re.findall(r"^\| `([^`]+)` +\| ([^|]+?) +\|", out, re.M))
    assert list(rows) == [
        "import memory_plugin.cli",
        "status (cold)",
        "inspect --user (cold)",
        "status (running)",
        "inspect --user (running)",
        "db-url (running)",
        "stop (running)",
    ]
    assert all(float(wall) > 0 for wall in rows.values())
    assert "`import memory_plugin.cli` loads: none (of" in out  # the quick commands' import pulls no heavy library
    assert list(private.iterdir()) == []  # the data directory (and its server) are gone
    shutil.rmtree(private)


@pytest.mark.slow
def test_embedding_latency_bench_compares_both_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import embedding_latency

    args = ["--calls", "6", "--round", "3", "--batches", "2", "--questions", "/nonexistent.jsonl"]
    assert embedding_latency.main(args) == 0
    out = capsys.readouterr().out
    assert "(6 questions, synthetic; 2 batches" in out
    rows = dict(re.findall(r"^\| ([^|]+?) +\| ([^|]+?) +\|", out, re.M))
    assert set(rows) >= {"torch eager", "onnxruntime", "ONNX export (torch.onnx.export)"}
    assert float(rows["ONNX export (torch.onnx.export)"].removesuffix(" s")) > 0  # a fresh cache: really exported
    assert float(rows["min cosine, onnx vs torch question vectors"]) >= 0.9999
    assert float(rows["min cosine, onnx vs torch fact vectors (batches)"]) >= 0.9999


@pytest.mark.slow
def test_retrieval_latency_bench_reports_the_plans_memory_search_chose(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import retrieval_latency

    private = Path(tempfile.mkdtemp(prefix="mpr-"))  # short: the server's socket path must stay valid
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    assert retrieval_latency.main(["--sizes", "300,2500,6000", "--other-rows", "3000", "--calls", "3"]) == 0
    out = capsys.readouterr().out
    crowded = "2,500, in the 6,000-fact user's partition"
    timings = {m[0]: m[1:] for m in re.findall(r"^\| ([^|]+?) \| 3 \| ([\d.]+) \| ([\d.]+) \|", out, re.M)}
    assert set(timings) == {"300", "2,500", "6,000", crowded}
    assert all(0 < float(p50) <= float(p95) for p50, p95 in timings.values())
    plans = dict(re.findall(r"^\| ([^|]+?) \| (exact[^|]*|HNSW[^|]*|other[^|]*) \|", out, re.M))
    # Above search_exact_scan_below (5,000) HNSW, unless the user is a small share of their partition.
    assert plans["300"].startswith("exact")
    assert plans["2,500"].startswith("exact")
    assert plans["6,000"].startswith("HNSW")
    assert plans[crowded].startswith("exact")
    assert "search, embedding included" in out
    monkeypatch.undo()
    shutil.rmtree(private)  # torch may leave its compile cache there
