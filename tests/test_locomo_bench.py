"""`bench/locomo.py` on a tiny conversation written here (LoCoMo's own data is never in the repository)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench import locomo
from memory_plugin import MemorySettings

TURNS = [
    ("D1:1", 1, "2023-05-08T13:56", "Ana", "Hi Luis! I finally adopted a dog, her name is Luna.", None),
    ("D1:2", 1, "2023-05-08T13:56", "Luis", "Congrats! I have been busy restoring my old bicycle.", None),
    ("D1:3", 1, "2023-05-08T13:56", "Ana", "Nice. I also started pottery classes last week.", None),
    ("D2:1", 2, "2023-06-20T18:00", "Luis", "I rode the bicycle to the coast yesterday!", "a photo of a beach"),
    ("D2:2", 2, "2023-06-20T18:00", "Ana", "Luna loved the beach too when we went in May.", None),
]
QUESTIONS = [
    ("tiny_q0", "What is the name of Ana's dog?", 4, ["D1:1"]),
    ("tiny_q1", "When did Luis ride his bicycle to the coast?", 2, ["D2:1"]),
    ("tiny_q2", "What hobby did Ana start?", 4, ["D1:3"]),
]


def _write(tmp_path: Path) -> tuple[Path, Path]:
    turns = tmp_path / "turns.jsonl"
    questions = tmp_path / "questions.jsonl"
    with turns.open("w") as f:
        for i, (dia, session, when, speaker, text, caption) in enumerate(TURNS):
            row: dict[str, Any] = {"conv_id": "tiny", "dia_id": dia, "session": session, "session_date": when,
                                   "session_datetime": when, "turn_index": i, "speaker": speaker, "text": text,
                                   "blip_caption": caption}  # fmt: skip
            f.write(json.dumps(row) + "\n")
    with questions.open("w") as f:
        for qid, question, category, evidence in QUESTIONS:
            row = {"conv_id": "tiny", "qid": qid, "question": question, "answer": None, "adversarial_answer": None,
                   "category": category, "category_name": "", "evidence": evidence}  # fmt: skip
            f.write(json.dumps(row) + "\n")
    return turns, questions


def _scorer(tmp_path: Path) -> Path:
    """A stand-in for LoCoMo's score.py (same command line): prints recall@1 per question."""
    scorer = tmp_path / "score.py"
    scorer.write_text(
        "import argparse, json\n"
        "ap = argparse.ArgumentParser(); ap.add_argument('--questions'); ap.add_argument('--pred')\n"
        "ap.add_argument('--ks')\n"
        "a = ap.parse_args()\n"
        "qs = {q['qid']: q for q in map(json.loads, open(a.questions))}\n"
        "for p in map(json.loads, open(a.pred)):\n"
        "    print(p['qid'], 'R@1', float(p['retrieved'][:1] == qs[p['qid']]['evidence'][:1]))\n"
    )
    return scorer


def _main(
    settings: MemorySettings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    turns: Path,
    questions: Path,
    *flags: str,
) -> Path:
    """Run `bench.locomo` on `settings`' database with the stand-in scorer and `flags`; it must exit 0. The
    predictions' path."""
    out = tmp_path / "pred.jsonl"
    assert settings.database_url is not None
    monkeypatch.setenv("MEMORY_DATABASE_URL", settings.database_url.get_secret_value())
    assert locomo.main(["--turns", str(turns), "--questions", str(questions), "--out", str(out),
                        "--scorer", str(_scorer(tmp_path)), *flags]) == 0  # fmt: skip
    return out


def test_the_benchmark_stores_turns_answers_questions_and_scores(
    pg_settings: MemorySettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    turns, questions = _write(tmp_path)

    out = _main(pg_settings, monkeypatch, tmp_path, turns, questions, "--compare", "--before")

    predictions = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["qid"] for p in predictions] == ["tiny_q0", "tiny_q1", "tiny_q2"]
    assert all(sorted(p["retrieved"]) == sorted(t[0] for t in TURNS) for p in predictions)  # every turn, ranked
    printed = capfd.readouterr().out
    for qid, *_ in QUESTIONS:
        assert f"{qid} R@1 1.0" in printed  # each answer's turn ranked first
    assert "search p50 / p95" in printed
    # --compare and --before: the hybrid order and the previous reranker, scored and timed in the same run.
    for mode in ("without the reranker", "previous reranker (dbc76bb)"):
        assert f"search p50 / p95, limit 10, question embedding included, {mode}" in printed
        assert f"ratio p50 / p95, reranker / {mode}" in printed
    for suffix in ("-hybrid", "-before"):
        assert len(out.with_name(out.stem + suffix + out.suffix).read_text().splitlines()) == 3
    assert "sentence-transformers:all-MiniLM-L6-v2" in printed


def test_a_turn_becomes_a_note_with_its_date_speaker_and_caption() -> None:
    row = {"conv_id": "c", "dia_id": "D2:1", "session": 2, "session_datetime": "2023-06-20T18:00",
           "turn_index": 0, "speaker": "Luis", "text": "I rode to the coast", "blip_caption": "a beach"}  # fmt: skip

    note = locomo.turn_note(row)

    assert note.content == "Luis: I rode to the coast [image: a beach]"
    assert note.metadata == {"dia_id": "D2:1", "speaker": "Luis"}
    assert note.session_id == "c/session-2"
    assert note.occurred_at is not None
    assert note.occurred_at.isoformat() == "2023-06-20T18:00:00+00:00"


def test_one_user_mode_asks_every_question_against_all_conversations(
    pg_settings: MemorySettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    turns, questions = _write(tmp_path)
    # A second conversation with the same dia_ids (as LoCoMo's have), about other things.
    other = [
        {**json.loads(line), "conv_id": "other", "text": f"My cat knocked over plant number {i}."}
        for i, line in enumerate(turns.read_text().splitlines())
    ]
    with turns.open("a") as f:
        f.writelines(json.dumps(row) + "\n" for row in other)

    out = _main(pg_settings, monkeypatch, tmp_path, turns, questions, "--one-user")

    predictions = [json.loads(line) for line in out.read_text().splitlines()]
    for p in predictions:  # all ten turns, the question's own by their dia_id, the others' qualified
        assert sorted(p["retrieved"]) == sorted([t[0] for t in TURNS] + [f"other|{t[0]}" for t in TURNS])
    printed = capfd.readouterr().out
    for qid, *_ in QUESTIONS:
        assert f"{qid} R@1 1.0" in printed
    assert "one user holding every conversation" in printed


def test_a_turn_the_policy_refuses_is_reported_and_skipped_and_long_turns_are_kept(
    pg_settings: MemorySettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    turns, questions = _write(tmp_path)
    extra = [
        {"conv_id": "tiny", "dia_id": "D2:3", "session": 2, "session_datetime": "2023-06-20T18:00", "turn_index": 9,
         "speaker": "Jo", "text": "4111 1111 1111 1111", "blip_caption": None},
        {"conv_id": "tiny", "dia_id": "D2:4", "session": 2, "session_datetime": "2023-06-20T18:00", "turn_index": 10,
         "speaker": "Ana", "text": "We talked for hours. " * 100, "blip_caption": None},
    ]  # fmt: skip
    with turns.open("a") as f:
        f.writelines(json.dumps(row) + "\n" for row in extra)

    out = _main(pg_settings, monkeypatch, tmp_path, turns, questions, "--compare", "--before")

    printed = capfd.readouterr().out
    assert "| turns refused by the privacy policy (skipped) | 1 |" in printed
    assert "- refused D2:3:" in printed
    predictions = [json.loads(line) for line in out.read_text().splitlines()]
    assert all("D2:4" in p["retrieved"] for p in predictions)  # the 2,100-character turn is stored
    assert all("D2:3" not in p["retrieved"] for p in predictions)


def test_the_rewrite_flag_stops_before_storing_when_the_model_cannot_be_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    turns, questions = _write(tmp_path)
    out = tmp_path / "pred.jsonl"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    assert locomo.main(["--turns", str(turns), "--questions", str(questions), "--out", str(out),
                        "--rewrite-model", "openai:gpt-4o-mini"]) == 2  # fmt: skip

    error = capfd.readouterr().err
    assert "the rewrite model 'openai:gpt-4o-mini' could not be reached" in error
    assert "OPENAI_API_KEY" in error
    assert not out.exists()  # nothing stored, nothing searched


async def test_the_rewrite_run_searches_each_question_with_the_model_s_phrasings(
    pg_settings: MemorySettings, tmp_path: Path
) -> None:
    turns, questions = _write(tmp_path)
    asked: list[str] = []

    def phrasings(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(str(messages[-1].parts[-1].content))  # type: ignore[union-attr]
        args = {"queries": ["pottery classes hobby", "dog named Luna"]}
        return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args=args)])

    out, rewritten = tmp_path / "pred.jsonl", tmp_path / "pred-rewrite.jsonl"
    timings = await locomo.run(turns, questions, out, pg_settings, rewrite_path=rewritten,
                               rewrite_model=FunctionModel(phrasings, model_name="scripted"))  # fmt: skip

    predictions = [json.loads(line) for line in rewritten.read_text().splitlines()]
    assert [p["qid"] for p in predictions] == ["tiny_q0", "tiny_q1", "tiny_q2"]
    assert all(sorted(p["retrieved"]) == sorted(t[0] for t in TURNS) for p in predictions)
    plain = {p["qid"]: p["retrieved"] for p in map(json.loads, out.read_text().splitlines())}
    assert predictions[1]["retrieved"][:2] != plain["tiny_q1"][:2]  # the phrasings' turns rose (fused lists)
    # The probe, then one call per question: each timed search asks afresh, the scored search reuses it.
    assert timings["rewrite"] == {"model": "function:scripted", "calls": 4, "failures": 0}
    assert len(asked) == 4
    assert asked[0] == f"Question: {locomo.PROBE_QUESTION}"
    assert set(timings["latency"]) == {"after", "rewrite"}


@pytest.mark.parametrize("model", ["test", locomo.STAND_IN])
def test_the_rewrite_flag_prints_its_own_score_table_and_latency(
    model: str,
    pg_settings: MemorySettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    turns, questions = _write(tmp_path)

    out = _main(pg_settings, monkeypatch, tmp_path, turns, questions, "--rewrite-model", model)

    printed = capfd.readouterr().out
    assert f"with the reranker and the LLM rewrite ({model}):" in printed
    assert f"| search p50 / p95, limit 10, question embedding included, reranker + LLM rewrite ({model}) |" in printed
    assert "| rewrite model calls / failures (a failure searched the question alone) | 4 / 0 |" in printed
    assert len(out.with_name("pred-rewrite.jsonl").read_text().splitlines()) == 3


def test_the_stand_in_phrasings_are_the_content_words_and_the_names() -> None:
    assert locomo.stand_in_phrasings("What did Caroline research in 2023?") == [
        "Caroline research 2023",
        "caroline 2023",
    ]
    assert locomo.stand_in_phrasings("What is it?") == []
