"""Verbatim notes: only the speaker's own clinical detail is redacted, the rest of the message is kept.

The labelled sentences in `tests/data/health_statements.jsonl` (Spanish and English) hold the speaker's own
diagnoses, medications and results, and the kinds of sentence that look clinical but are not: public events
(covid as a period), figures of speech, other people, hypotheticals, questions, shop vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from memory_plugin import MemorySettings
from memory_plugin.errors import MemoryPluginError
from memory_plugin.privacy import (
    HEALTH_PLACEHOLDER_EN,
    HEALTH_PLACEHOLDER_ES,
    NoteRedaction,
    redact_note_text,
    sanitize_fact_text,
)

ROWS: list[dict[str, Any]] = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "health_statements.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]
OWN = [r for r in ROWS if r["label"] == "own_clinical"]
NOT_OWN = [r for r in ROWS if r["label"] == "not_own_clinical"]


def test_the_labelled_set_covers_both_languages_and_every_confusable_kind() -> None:
    assert len(ROWS) >= 150
    assert {(r["label"], r["language"]) for r in ROWS} == {
        (label, language) for label in ("own_clinical", "not_own_clinical") for language in ("es", "en")
    }
    kinds = {r["kind"] for r in NOT_OWN}
    assert {"public_event", "figurative", "other_person", "hypothetical", "question"} <= kinds


@pytest.mark.parametrize("row", OWN, ids=[r["text"][:40] for r in OWN])
def test_the_speakers_own_clinical_detail_is_redacted(row: dict[str, Any]) -> None:
    result = redact_note_text(row["text"])
    assert row["kind"] in result.clinical
    placeholder = HEALTH_PLACEHOLDER_ES if row["language"] == "es" else HEALTH_PLACEHOLDER_EN
    assert result.text is None or placeholder in result.text


@pytest.mark.parametrize("row", NOT_OWN, ids=[r["text"][:40] for r in NOT_OWN])
def test_sentences_that_only_look_clinical_are_kept_exactly(row: dict[str, Any]) -> None:
    assert redact_note_text(row["text"]) == NoteRedaction(text=row["text"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Turns out I'm covid positive, so I cancelled the trip to Bilbao.",
            "Turns out [health detail], so I cancelled the trip to Bilbao.",
        ),
        ("I had to take acetaminophen after the long drive.", None),  # nothing else left: dropped
        ("I'm on metformin 850 mg since March.", None),
        ("My HbA1c was 7.2 last month, better than before.", "[health detail], better than before."),
        (
            "Tengo diabetes tipo 1 y no puedo hacer turnos de noche.",
            "[dato de salud] y no puedo hacer turnos de noche.",
        ),
        ("Di positivo en covid y cancelé la reunión.", "[dato de salud] y cancelé la reunión."),
        (
            "My mom has diabetes, and I take 20 mg of fluoxetine every morning.",
            "My mom has diabetes, and [health detail].",
        ),
    ],
)
def test_the_whole_clinical_clause_is_replaced_and_the_next_clause_kept(text: str, expected: str | None) -> None:
    assert redact_note_text(text).text == expected


def test_no_clinical_word_survives_a_redaction() -> None:
    result = redact_note_text("Me diagnosticaron epilepsia el año pasado y tomo levetiracetam... no, tomo 500 mg")
    assert result.text is not None
    assert "epilep" not in result.text
    assert "500 mg" not in result.text
    assert result.clinical == ("diagnosis", "medication")


def test_a_note_is_dropped_only_when_nothing_meaningful_is_left() -> None:
    assert redact_note_text("I tested positive.") == NoteRedaction(None, clinical=("test_result",), dropped="clinical")
    only_card = redact_note_text("4111 1111 1111 1111")
    assert (only_card.text, only_card.dropped, only_card.redacted) == (None, "only_sensitive", ("payment_card",))
    # Nothing redacted: kept however short, even without letters.
    assert redact_note_text(";)") == NoteRedaction(";)")
    assert not redact_note_text(";)").changed


def test_secrets_and_health_are_both_redacted_in_one_note() -> None:
    result = redact_note_text("My card is 4111 1111 1111 1111 and I'm on insulin, see you at 5")
    assert result.text == "My card is [redacted payment_card] and [health detail], see you at 5"
    assert (result.redacted, result.clinical) == (("payment_card",), ("medication",))
    assert result.changed


def test_with_consent_the_placeholder_says_what_the_condition_affects() -> None:
    text = "Tengo diabetes tipo 1 y no puedo hacer turnos de noche."
    kept = redact_note_text(text, consent="keep_notes")
    assert kept.text == "[dato de salud: afecta a los turnos] y no puedo hacer turnos de noche."
    only = redact_note_text("I have epilepsy, no travel.", consent="keep_notes")
    assert only.text == "[health detail: affects travel], no travel."
    for result in (kept, only):
        assert result.text is not None
        assert "diabetes" not in result.text
        assert "epilepsy" not in result.text


def test_with_consent_a_clinical_only_note_becomes_a_non_clinical_health_note() -> None:
    text = "Tomo sintrom, por los viajes"
    assert redact_note_text("Tomo sintrom", consent="keep_notes").text is None  # nothing to say about the service
    off = redact_note_text(text)
    assert off.text == "[dato de salud], por los viajes"
    note_only = redact_note_text("I have epilepsy: travel", consent="keep_notes")
    assert note_only.text is not None
    assert "epilepsy" not in note_only.text
    reduced = redact_note_text("I'm on warfarin, travel", consent="keep_notes")
    assert reduced.text is not None
    assert "warfarin" not in reduced.text


def test_extracted_facts_keep_the_stricter_rule() -> None:
    # A fact is one statement about the user: any clinical word in it is theirs, so it is reduced or dropped,
    # where a note only loses the span.
    text = "Tiene diabetes tipo 1 y no puede hacer turnos de noche"
    assert sanitize_fact_text(text, "fact").text == "Tiene una condición médica que afecta a los turnos"
    assert redact_note_text(text).text == text  # third person in a note: someone else's health


# --- settings -------------------------------------------------------------------------------------------------------
def test_note_and_fact_limits_are_separate_and_checked_against_each_other() -> None:
    settings = MemorySettings()
    assert (settings.max_note_chars, settings.max_fact_chars, settings.health_notes) == (16_000, 500, "off")
    with pytest.raises(ValidationError, match=r"max_fact_chars \(3000\) is larger than max_note_chars"):
        MemorySettings(max_fact_chars=3_000, max_note_chars=2_000)
    with pytest.raises(ValidationError):
        MemorySettings(health_notes="everything")  # type: ignore[arg-type]
    assert MemorySettings(health_notes="keep_notes").health_notes == "keep_notes"


def test_limits_above_the_schemas_content_check_fail_at_start_up_with_what_to_do() -> None:
    with pytest.raises(MemoryPluginError, match="MEMORY_MAX_NOTE_CHARS=2000 or less"):
        MemorySettings().check_content_limit(2_000)
    MemorySettings(max_note_chars=2_000).check_content_limit(2_000)
