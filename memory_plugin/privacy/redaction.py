"""Sensitive-data filter run on every text before it is stored, journaled, indexed or logged.

Long-term memory is read back into prompts for months, so it must never hold payment data, national ids,
passwords or credentials, even when a user typed them or an extractor copied them. `redact_sensitive`
replaces each finding with a placeholder such as ``[redacted payment_card]`` and says what it found.

Formats are judged by their checksums and context words, not by the shape of digit groups alone, so the
numbers a manufacturing conversation is full of pass intact: a part number that fails Luhn, a list of
quantities, an IBAN with a wrong check digit, a plan number followed by a letter, an order number shaped
like an SSN with no word saying it is one.

Every pass is linear in the input: each regex uses bounded or possessive repetition (no nested unbounded
backtracking) and each candidate is checked against a fixed number of shapes. A pass whose format cannot occur
in the text (no run of 13 digit-group characters, no 8 digits in a row, no letters-then-digits start of an
IBAN) is skipped after a check in C on the text's bytes, and each scan is written to start with a character or a
class so the engine skips ahead between candidates; what remains is a checksum per candidate. 20,000 characters
of everyday prose cost ~0.7 ms, of card-shaped groups failing Luhn ~2.7 ms (`bench/privacy_filter.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .api_keys import _redact_api_keys
from .cards import _redact_cards
from .identifiers import _redact_ibans, _redact_national_ids, _redact_other_ids, _redact_ssns
from .passwords import _redact_passwords


@dataclass(frozen=True)
class Redaction:
    """The result of `redact_sensitive`: the cleaned text and the kinds of data removed from it."""

    text: str
    """The input with each finding replaced by ``[redacted <kind>]``."""
    kinds: tuple[str, ...]
    """Kinds found, each once, in the order they are checked: "api_key", "iban", "national_id", "ssn",
    "payment_card", "password". Empty when nothing was redacted."""


# Order matters: specific shapes before generic ones, so an IBAN's digits are not taken for a card number.
_PASSES: tuple[tuple[str, Callable[[str], tuple[str, bool]]], ...] = (
    ("api_key", _redact_api_keys),
    ("iban", _redact_ibans),
    ("national_id", _redact_national_ids),
    ("national_id", _redact_other_ids),
    ("ssn", _redact_ssns),
    ("payment_card", _redact_cards),
    ("password", _redact_passwords),
)


# IBANs, national ids, SSNs and cards all hold a run of at least three digits ("12.345.678Z" has no four): text
# without one skips their four scans (~1.3 ms per 20,000 characters).
_NUMBER_GATE = re.compile(r"\d{3}")
_NEED_NUMBERS = frozenset({_redact_ibans, _redact_national_ids, _redact_ssns, _redact_cards})


def redact_sensitive(text: str) -> Redaction:
    """Replace payment cards, IBANs, Spanish DNI/NIE, US SSNs, stated passwords and API keys in `text`.

    Each finding becomes ``[redacted <kind>]``; the rest of the text is kept as written:

    >>> redact_sensitive("Paga con la 4111 1111 1111 1111, gracias").text
    'Paga con la [redacted payment_card], gracias'
    """
    kinds: list[str] = []
    numbers = _NUMBER_GATE.search(text) is not None
    for kind, redact in _PASSES:
        if redact in _NEED_NUMBERS and not numbers:
            continue
        text, found = redact(text)
        if found and kind not in kinds:
            kinds.append(kind)
    return Redaction(text=text, kinds=tuple(kinds))


def contains_sensitive(text: str) -> bool:
    """True when `redact_sensitive` would change `text`."""
    return bool(redact_sensitive(text).kinds)
