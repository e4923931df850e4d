"""`bench.session_calls` runs its measuring code on each checkout given and prints one row per call and checkout
(here this checkout against itself, one round of a few calls: the shape, never a timing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import session_calls

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_session_calls_compares_checkouts_call_by_call(capsys: pytest.CaptureFixture[str]) -> None:
    assert session_calls.main(["--before", str(ROOT), "--after", str(ROOT), "--rounds", "1", "--calls", "10"]) == 0
    out = capsys.readouterr().out
    for call in ("manager: add_message", "manager: get_short_term", "manager: add_message without user"):
        assert f"| {call} " in out
    for call in ("store alone: add_message", "store alone: snapshot", "store alone: update_entities"):
        assert f"| {call} " in out
    assert "1.00×" in out
