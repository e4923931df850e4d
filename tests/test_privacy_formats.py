"""Secret formats as people really write them, the shop text that only looks like them, JSON values, and the
filter's cost growing linearly with its input."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from memory_plugin.privacy import (
    OFFLOAD_THRESHOLD_CHARS,
    cards,
    own_health,
    redact_json,
    redact_json_value,
    redact_note_text,
    redact_note_text_async,
    redact_sensitive,
    run_filter,
)


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        # Cards: dots, double spaces, no-break spaces, slashes, glued to letters, Amex grouping.
        ("Visa 4111.1111.1111.1111 caduca", "Visa [redacted payment_card] caduca", "payment_card"),
        ("card 4539  1488  0343  6467 thanks", "card [redacted payment_card] thanks", "payment_card"),
        ("tarjeta 4111\u00a01111\u00a01111\u00a01111", "tarjeta [redacted payment_card]", "payment_card"),
        ("tarjeta 4111\u202f1111\u202f1111\u202f1111", "tarjeta [redacted payment_card]", "payment_card"),
        ("card 4111/1111/1111/1111 ok", "card [redacted payment_card] ok", "payment_card"),
        ("visa4111111111111111exp", "visa[redacted payment_card]exp", "payment_card"),
        ("Amex 3782 822463 10005 please", "Amex [redacted payment_card] please", "payment_card"),
        ("Mastercard 5555-5555-5555-4444.", "Mastercard [redacted payment_card].", "payment_card"),
        # IBANs: lower case, dashes, compact lower case.
        ("iban es91 2100 0418 4502 0005 1332 ok", "iban [redacted iban] ok", "iban"),
        ("IBAN ES91-2100-0418-4502-0005-1332.", "IBAN [redacted iban].", "iban"),
        ("cuenta es9121000418450200051332", "cuenta [redacted iban]", "iban"),
        ("Konto de89 3704 0044 0532 0130 00 bitte", "Konto [redacted iban] bitte", "iban"),
        # SSNs with spaces, dots or nothing, next to a word saying what they are.
        ("My SSN is 123 45 6789", "My SSN is [redacted ssn]", "ssn"),
        ("SSN: 123.45.6789", "SSN: [redacted ssn]", "ssn"),
        ("social security number 123456789.", "social security number [redacted ssn].", "ssn"),
        # DNI with a spaced letter, after a word naming the document.
        ("Mi DNI es 12345678 Z", "Mi DNI es [redacted national_id]", "national_id"),
        # API keys: AWS secret keys, Stripe, Google.
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_access_key = [redacted api_key]",
            "api_key",
        ),
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY is the secret", "[redacted api_key] is the secret", "api_key"),
        ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe [redacted api_key]", "api_key"),
        ("rk_test_51H8xYzAbCdEfGhIjKlMn en pruebas", "[redacted api_key] en pruebas", "api_key"),
        ("maps AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI ok", "maps [redacted api_key] ok", "api_key"),
        # Passwords however they are phrased.
        ("password is: hunter2", "password is: [redacted password]", "password"),
        ("pwd: hunter2", "pwd: [redacted password]", "password"),
        ("pass: Hunter22", "pass: [redacted password]", "password"),
        ("pw= abc123!", "pw= [redacted password]", "password"),
        ("login juan / S3cret!", "login juan / [redacted password]", "password"),
        ("usuario: juan/Portal.2024", "usuario: juan/[redacted password]", "password"),
        (
            "las contraseñas son Abc123 y Xyz789, gracias",
            "las contraseñas son [redacted password] y [redacted password], gracias",
            "password",
        ),
        ("La contraseña era: «Tornillo#7»", "La contraseña era: «[redacted password]»", "password"),
    ],
)
def test_every_written_form_of_a_secret_is_redacted(text: str, expected: str, kind: str) -> None:
    redaction_ = redact_sensitive(text)
    assert (redaction_.text, redaction_.kinds) == (expected, (kind,))


@pytest.mark.parametrize(
    "text",
    [
        "Plano número 12345678 Z",  # valid DNI letter by chance, but a plan number: no word naming an id
        "Pedido 123-45-6789",  # SSN-shaped order number, no SSN context
        "Pedido 123 45 6789 para el lunes",
        "Cotas 100 200 300 400 500 600 700 800",  # dimensions: Luhn-valid spans of 3-digit groups
        "4 lotes: 1000 2000 3000 4000",  # Luhn-valid by chance, but round quantities starting with 1
        "Lotes de 2000 1000 3000 4000 piezas",  # Luhn-valid, issuer digit 2, but every group a round quantity
        "Referencia 7075-1111-2222-3332",  # Luhn-valid, but issuer digit 7 is not a card network
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",  # a git SHA-1 is 40 hex chars, not an AWS secret
        "I pass: the ball goes to Mel",
        "the pass is open all week",
        "user juan/hola",  # "hola" does not look like a secret
        "las contraseñas son distintas y largas",
        "Llámame al 612 345 678 o al 91 123 45 67",
        "Plano 1.2379 a 58 HRC, tolerancia 0.05",
        "Entrega el 15/03/2025 a las 14.30",
        "El código postal es 28080 y el portal 12",
        "es decir 21000418450200051332",  # lower-case Spanish words before digits: not an IBAN country
    ],
)
def test_shop_text_that_looks_like_secrets_is_left_alone(text: str) -> None:
    assert redact_sensitive(text).text == text


def test_a_card_with_mixed_separators_is_a_list_of_numbers() -> None:
    # "4111 1111-1111.1111": three different separators inside one number is not how cards are written.
    assert redact_sensitive("valores 4111 1111-1111.1111").kinds == ()


# --- JSON values ------------------------------------------------------------------------------------------------
def test_redact_json_cleans_every_string_and_keeps_the_shape() -> None:
    metadata: dict[str, Any] = {
        "speaker": "Juan (DNI 12345678Z)",
        "payment": {"card": "4111 1111 1111 1111", "raw": 4111111111111111, "qty": 3, "ok": True, "p": 2.5},
        "notes": ["password: hunter2", None, {"iban": "ES91 2100 0418 4502 0005 1332"}],
        "4539148803436467": "key of a dict",
    }
    result = redact_json_value(metadata)
    assert result.value == {
        "speaker": "Juan (DNI [redacted national_id])",
        "payment": {
            "card": "[redacted payment_card]",
            "raw": "[redacted payment_card]",
            "qty": 3,
            "ok": True,
            "p": 2.5,
        },
        "notes": ["password: [redacted password]", None, {"iban": "[redacted iban]"}],
        "[redacted payment_card]": "key of a dict",
    }
    assert sorted(result.kinds) == ["iban", "national_id", "password", "payment_card"]
    assert redact_json(metadata) == result.value
    assert metadata["payment"]["raw"] == 4111111111111111  # the input is not modified


def test_redact_json_leaves_clean_values_equal() -> None:
    value = {"source": "import", "turn": 12, "tags": ["acero", "7075"], "order": 1234567890123}
    assert redact_json(value) == value
    assert redact_json("4111 1111 1111 1111") == "[redacted payment_card]"
    assert redact_json([1, 2.5, None, False]) == [1, 2.5, None, False]


# --- linear time ------------------------------------------------------------------------------------------------
def _count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> Callable[[], int]:
    calls = 0
    original = getattr(module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return lambda: calls


def _adversarial(size: int) -> str:
    parts = ["4111 1111 1111 111 ", "4444 4444 4444 4444 x ", "1 2 3 4 5 6 7 8 9 0 1 2 3 4 ", "es91 2100 0418 4502 "]
    text = "".join(parts) * (size // sum(map(len, parts)) + 1)
    return text[:size]


def test_card_checks_grow_linearly_with_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    luhn_calls = _count_calls(monkeypatch, cards, "_luhn_valid")
    redact_sensitive(_adversarial(2_000))
    small = luhn_calls()
    redact_sensitive(_adversarial(20_000))
    large = luhn_calls() - small
    assert small > 0
    # Every span of digit groups (the old search) made this 100x and more; fixed shapes per group keep it ~10x.
    assert large <= 11 * small


def test_one_long_run_of_digit_groups_costs_no_more_than_its_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    luhn_calls = _count_calls(monkeypatch, cards, "_luhn_valid")
    run = " ".join(["4539", "1488", "0343", "6460", "12"] * 2)  # 10 groups, below the table cut-off
    redact_sensitive(run)
    assert luhn_calls() <= 10 * len(cards._CARD_SHAPES)


class _ScanCounter:
    """Stands in for a compiled pattern and counts its scans and the characters they cover."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scans = 0
        self.scanned = 0

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Any:
        self.scans += 1
        self.scanned += min(endpos, len(string)) - pos
        return self.pattern.finditer(string, pos, endpos)

    def search(self, *args: Any) -> Any:
        self.scans += 1
        return self.pattern.search(*args)


# ~260 characters per clinical term: long text, but not dense in clinical words (see the dense-text tests).
_SPARSE_UNIT = (
    "my mom has diabetes and we went for a long walk by the river with the dogs and the kids and then we had"
    " lunch at the small place near the bridge where they make the best tortilla in town and talked about"
    " the trip to the mountains next summer and the new bikes and "
)


def test_health_cues_are_scanned_near_the_terms_never_once_per_term(monkeypatch: pytest.MonkeyPatch) -> None:
    owners = _ScanCounter(own_health._FIRST_PERSON)
    monkeypatch.setattr(own_health, "_FIRST_PERSON", owners)
    text = (_SPARSE_UNIT.replace("my mom has", "I have") + ". ") * 60
    spans = own_health.find_own_clinical_spans(text)
    assert len(spans) == 60  # "I have diabetes", each time the speaker's own
    assert owners.scans <= 60  # one scan per window of nearby terms, never one per term and cue
    assert owners.scanned < len(text)  # only the stretches before the terms are read


def test_a_long_note_without_sentence_ends_is_still_filtered() -> None:
    text = _SPARSE_UNIT * 70 + "I'm on metformin 850 mg"
    assert len(text) > 16_000
    result = redact_note_text(text)
    assert result.text is not None
    assert result.text.endswith("[health detail]")
    assert result.text.count("diabetes") == 70


def test_text_dense_in_clinical_words_has_every_term_redacted_and_keeps_the_rest() -> None:
    """64+ clinical terms, one per 250 characters or closer: not read word by word; every term goes (privacy
    first, also other people's), the note is kept, and it costs no more than plain text (bench)."""
    text = "I think my mom has diabetes and I take 850 mg of covid, so I cancelled the trip. " * 100
    result = redact_note_text(text)
    assert result.text is not None
    for clinical in ("diabetes", "850 mg", "covid"):
        assert clinical not in result.text
    assert result.text.count("so I cancelled the trip") == 100
    assert set(result.clinical) >= {"diagnosis", "medication"}
    sparse = redact_note_text("I think my mom has diabetes and I take 850 mg of covid, so I cancelled the trip.")
    assert sparse.text is not None
    assert "my mom has diabetes" in sparse.text  # read word by word: someone else's condition stays


def test_a_letter_lower_casing_to_two_characters_does_not_move_the_cues() -> None:
    # "İ" lower-cases to two characters; the "Si" of an earlier sentence must not land near the term.
    note = " Si. Hoy tengo diabetes tipo 2 y ya."
    assert own_health.own_clinical_span_bounds("İ" * 12 + note) == own_health.own_clinical_span_bounds("I" * 12 + note)
    assert own_health.own_clinical_span_bounds("İ" * 12 + note) != []


# --- off the event loop -----------------------------------------------------------------------------------------
async def test_large_input_is_filtered_in_a_worker_thread() -> None:
    threads: list[str] = []

    def record(text: str) -> int:
        threads.append(threading.current_thread().name)
        return len(text)

    main = threading.current_thread().name
    assert await run_filter(record, "x" * 10) == 10
    assert await run_filter(record, "x" * (OFFLOAD_THRESHOLD_CHARS + 1)) == OFFLOAD_THRESHOLD_CHARS + 1
    assert threads[0] == main
    assert threads[1] != main


async def test_the_async_note_filter_gives_the_same_result() -> None:
    text = ("Charge 4111 1111 1111 1111. Turns out I'm covid positive, so I cancelled the trip. " * 60).strip()
    assert len(text) > OFFLOAD_THRESHOLD_CHARS
    assert await redact_note_text_async(text) == redact_note_text(text)
    results = await asyncio.gather(*(redact_note_text_async(text) for _ in range(3)))
    assert all(r == results[0] for r in results)


def test_consent_notes_are_worked_out_once_per_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_plugin.privacy import policy

    screens = _count_calls(monkeypatch, policy, "screen_health")
    text = "I'm on insulin, so no night shifts. " * 300
    result = redact_note_text(text, consent="keep_notes")
    assert result.text is not None
    assert result.text.count("[health detail: affects shifts]") == 300
    assert screens() == 1
