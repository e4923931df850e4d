"""The speaker's own clinical statements are redacted clause by clause, ordinary sentences kept as written.

`tests/data/clinical_clauses.jsonl` holds sentences written for this test, in Spanish and English: the user's own
condition, treatment, procedure or medication (each with the words that must not survive), and ordinary sentences
full of words that only look sensitive ("my password manager is great", "the clinic's wifi", "I run a pharmacy").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_plugin.privacy import NoteRedaction, redact_note_text
from memory_plugin.privacy.own_health import fold_same_length

ROWS: list[dict[str, Any]] = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "clinical_clauses.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]
OWN = [r for r in ROWS if r["label"] == "own_clinical"]
ORDINARY = [r for r in ROWS if r["label"] == "ordinary"]


def leaks(row: dict[str, Any]) -> list[str]:
    """The clinical words of `row` still readable after the note filter (none when the note is dropped)."""
    text = redact_note_text(row["text"]).text
    folded = fold_same_length(text) if text is not None else ""
    return [word for word in row["leaks"] if word in folded]


def test_the_set_covers_both_languages_and_every_kind_of_clinical_statement() -> None:
    assert {(r["label"], r["language"]) for r in ROWS} == {
        (label, language) for label in ("own_clinical", "ordinary") for language in ("es", "en")
    }
    assert {r["kind"] for r in OWN} == {"condition", "treatment", "procedure", "medication"}
    assert len(OWN) >= 60
    assert len(ORDINARY) >= 60


def test_at_least_95_percent_of_the_users_own_clinical_statements_are_protected() -> None:
    leaked = {row["text"]: words for row in OWN if (words := leaks(row))}
    assert len(leaked) <= 0.05 * len(OWN), leaked


@pytest.mark.parametrize("row", ORDINARY, ids=[r["text"][:40] for r in ORDINARY])
def test_ordinary_sentences_are_kept_as_written(row: dict[str, Any]) -> None:
    assert redact_note_text(row["text"]) == NoteRedaction(text=row["text"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "I start chemo next week for my lymphoma, so I'll be working from home.",
            "[health detail], so I'll be working from home.",
        ),
        ("Tomo sertralina por ansiedad desde hace un año.", None),  # nothing else: dropped
        ("I have asthma and use an inhaler every day.", "[health detail] and [health detail]."),
        ("Me operan de la rodilla el lunes, cirugía de menisco.", None),
    ],
)
def test_the_whole_clause_goes_not_the_term_alone(text: str, expected: str | None) -> None:
    assert redact_note_text(text).text == expected


def test_a_run_on_clause_is_cut_within_reach() -> None:
    text = "I take metformin " + "every single day " * 40
    result = redact_note_text(text).text
    assert result is not None
    assert result.startswith("[health detail] every single day")  # the clause reaches 120 characters, no further
    assert "metformin" not in result
