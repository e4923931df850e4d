"""The privacy filter's fast patterns and gates against their plain forms (differential tests).

Each pattern the filter scans whole texts with is laid out for speed: word lists grouped by first character,
look-behinds moved after the first character, patterns split so they start with a character class, cheap
byte-level gates checked before a scan. Each must find exactly what its plain form finds. The plain forms are
written out here as the reference; the corpus is the labelled health set, the benchmark's adversarial inputs
and seeded random mixes of the words, numbers and punctuation the patterns look for.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.privacy_filter import ADVERSARIAL
from memory_plugin.privacy import api_keys, cards, health, identifiers, own_health, scan
from memory_plugin.privacy.patterns import by_first_char, split_alternatives

HEALTH_SET = Path(__file__).parent / "data" / "health_statements.jsonl"

# Words, numbers and marks the patterns look for, one space apart.
_WORDS = (
    "I i'm my me mom he he sido él si sí if what if puede que igual tengo no se si que she who tengo tomo di "
    "diabetes covid covid-19 covid19 cancer depression heart attack infarto metformin insulina 850 mg 0,5 mcg "
    "HbA1c 7.2 % glucose 180 blood sugar was high tested positive dio positivo diagnosed with mg/dl mmol/l "
    'been got had taking but pero while although , : ( ) " . ! ? ; ¿ ¡ \n - / + = _ x X Y z '
    "4111 1111 4444 12345678 12.345.678 Z X1234567L ES91 es91 2100 0418 GB82 WEST 123-45-6789 SSN DNI "
    "sk_live_ AIza AKIA eyJ password pass: pwd= login user token key clave api secret İ ß ﬁ é ñ"
)
_PIECES = [
    *_WORDS.split(" "),
    "  ",
    "\u00a0",
    "\t",
    "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/ab",
    "7" * 20,
]


def _mixes(count: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(count):
        words = [rng.choice(_PIECES) for _ in range(rng.randint(1, 40))]
        yield "".join(word + rng.choice(["", " ", " ", " ", "  ", ". ", ", ", "\n"]) for word in words)


def _corpus() -> list[str]:
    texts = [json.loads(line)["text"] for line in HEALTH_SET.read_text(encoding="utf-8").splitlines() if line]
    texts += [make(size) for make in ADVERSARIAL.values() for size in (137, 500, 2_000)]
    texts += list(_mixes(1_500, seed=13))
    texts += [text.upper() for text in texts[:200]]
    return texts


CORPUS = _corpus()
FOLDED = [own_health.fold_same_length(text) for text in CORPUS]


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    return [m.span() for m in pattern.finditer(text)]


# --- clinical terms ------------------------------------------------------------------------------------------
_PLAIN_CLINICAL = re.compile(
    r"(?<!\w)(?:(?P<test_result>" + health._TEST_RESULT_FORMS + r")|(?P<diagnosis>" + health._DIAGNOSIS_WORDS + r")\b"
    r"|(?P<medication>" + health._MEDICATION_WORDS + r")\b)"
)


def test_clinical_terms_are_found_with_their_kinds_as_by_the_plain_alternation() -> None:
    kinds = health.CLINICAL_TERM_KINDS
    for folded in FOLDED:
        expected = [(m.span(), m.lastgroup) for m in _PLAIN_CLINICAL.finditer(folded)]
        for pattern in (health.CLINICAL_TERM, health.CLINICAL_TERM_FEW_LETTERS):
            found = [(m.span(), kinds[(m.lastindex or 0) - 1]) for m in pattern.finditer(folded)]
            assert found == expected, folded[:200]
    assert any(_PLAIN_CLINICAL.search(folded) for folded in FOLDED)


@pytest.mark.parametrize(
    ("fast", "words"),
    [
        (health.DIAGNOSIS, health._DIAGNOSIS_WORDS + r"\b"),
        (health.MEDICATION, health._MEDICATION_WORDS + r"\b"),
        (health.TEST_RESULT, health._TEST_RESULT_FORMS),
    ],
    ids=["diagnosis", "medication", "test_result"],
)
def test_each_clinical_kind_matches_as_its_plain_alternation(fast: re.Pattern[str], words: str) -> None:
    plain = re.compile(r"(?<!\w)" + words)
    assert all(_spans(fast, folded) == _spans(plain, folded) for folded in FOLDED)


def test_doses_are_found_as_by_the_look_behind_first_pattern() -> None:
    plain = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)?\s?(?:mg|mcg|µg|ug)(?:/d[ií]a|/day|/dl)?\b")
    for text in CORPUS:
        assert _spans(health.DOSE, text) == _spans(plain, text)
        if plain.search(text):  # the unit gate never hides a dose
            assert any(unit in text for unit in own_health._DOSE_UNIT_ENDS)


def test_language_hints_count_as_the_plain_word_lists() -> None:
    spanish = re.compile(r"[ñáéíóú¿¡]|\b(?:" + health._SPANISH_WORDS + r")\b", re.IGNORECASE)
    english = re.compile(r"\b(?:" + health._ENGLISH_WORDS + r")\b", re.IGNORECASE)
    for text in CORPUS:
        assert health._SPANISH_HINT.findall(text) == spanish.findall(text)
        assert health._ENGLISH_HINT.findall(text) == english.findall(text)


# --- the cues around a term ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fast", "words"),
    [
        (own_health._FIRST_PERSON, own_health._FIRST_PERSON_WORDS),
        (own_health._OTHER_OWNER, own_health._OTHER_OWNER_WORDS),
        (own_health._HYPOTHETICAL, own_health._HYPOTHETICAL_WORDS),
    ],
    ids=["first_person", "other_owner", "hypothetical"],
)
def test_cue_word_lists_match_as_their_plain_alternation(fast: re.Pattern[str], words: str) -> None:
    plain = re.compile(r"(?<!\w)(?:" + words + r")\b")
    assert all(_spans(fast, folded) == _spans(plain, folded) for folded in FOLDED)


def test_class_first_cue_patterns_match_as_their_plain_forms() -> None:
    sentence_end = re.compile(r"[!?;\n¿¡]|\.(?!\d)")
    clause_end = re.compile(r"[,:()\"]|\s(?:but|pero|although|aunque|while|mientras|whereas)\s")
    subjectless = re.compile(r"(?:^|[.!?\n]\s*+)" + own_health._SUBJECTLESS_VERB)
    for text, folded in zip(CORPUS, FOLDED, strict=True):
        lowered = text.lower()
        assert _spans(own_health._SENTENCE_END, folded) == _spans(sentence_end, folded)
        assert _spans(own_health._CLAUSE_END, folded) == _spans(clause_end, folded)
        assert _spans(own_health._SPANISH_IF, lowered) == _spans(re.compile(r"\bsi\b"), lowered)
        assert _spans(own_health._HE, lowered) == _spans(re.compile(r"\bél\b"), lowered)
        first = own_health._SUBJECTLESS_AT_START.match(folded)
        verbs = ([first.span("verb")] if first else []) + [
            m.span("verb") for m in own_health._SUBJECTLESS.finditer(folded)
        ]
        assert verbs == [m.span("verb") for m in subjectless.finditer(folded)]


# --- secrets -------------------------------------------------------------------------------------------------
_PLAIN_DIGIT_RUN = re.compile(r"(?=[\d" + scan._SPACES + r"./-]{13})\d++(?:" + cards._SEPARATOR + r"\d++)*+")
_PLAIN_DNI = re.compile(r"(?<![\w.])(?P<num>\d{2}\.?\d{3}\.?\d{3})(?:-?(?P<l1>[A-Za-z])|[ \u00a0](?P<l2>[A-Z]))(?!\w)")
_PLAIN_NIE = re.compile(r"\b(?P<prefix>[XYZxyz])[ -]?(?P<num>\d{7})[ -]?(?P<letter>[A-Za-z])(?!\w)")


def test_digit_first_secret_patterns_match_as_their_plain_forms() -> None:
    for text in CORPUS:
        assert _spans(cards._DIGIT_RUN, text) == _spans(_PLAIN_DIGIT_RUN, text)
        assert _spans(identifiers._DNI, text) == _spans(_PLAIN_DNI, text)
        assert _spans(identifiers._NIE, text) == _spans(_PLAIN_NIE, text)


def test_byte_gates_never_hide_a_candidate() -> None:
    """Each gate skips a scan only when the scan could find nothing, and a gate's first hit comes no later than
    the first match of the pattern it stands before."""
    for text in CORPUS:
        if _PLAIN_DIGIT_RUN.search(text):
            assert scan._has_run(text, cards._DIGIT_RUN_BYTES, 13)
        if api_keys._AWS_SECRET.search(text):
            assert scan._has_run(text, api_keys._BASE64_BYTES, 40)
        if identifiers._IBAN.search(text):
            assert b"aadd" in text.encode("utf-8", "surrogatepass").translate(identifiers._LETTER_DIGIT_SHAPE)
        for pattern, gate, table, length in (
            (_PLAIN_DNI, identifiers._DNI_GATE, identifiers._DIGIT_OR_DOT_BYTES, 8),
            (_PLAIN_NIE, identifiers._NIE_GATE, identifiers._DIGIT_BYTES, 7),
        ):
            match = pattern.search(text)
            if match:
                assert scan._has_run(text, table, length)
                hit = gate.search(text)
                assert hit is not None
                assert hit.start() <= match.start()


def test_key_prefix_gates_never_hide_a_literal() -> None:
    for required, literals, _ in api_keys._API_KEY_GATES:
        assert all(required in literal for literal in literals)


def test_single_space_runs_split_as_the_regex_splits_them() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        run = " ".join(str(rng.randrange(10 ** rng.randint(0, 7))) for _ in range(rng.randint(1, 15)))
        split = cards._split_run(run)
        parts = cards._GROUP_SPLIT.split(run)
        if len(parts[1::2]) > cards._MAX_CARD_RUN_GROUPS:
            assert split is None
        else:
            assert split == (parts[1::2], parts[2:-1:2], True)


def _luhn_by_digit(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _mod97_by_character(compact: str) -> int:
    remainder = 0
    for char in (compact[4:] + compact[:4]).upper():
        value = int(char, 36)
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
    return remainder


def test_check_digits_agree_with_the_digit_by_digit_definitions() -> None:
    rng = random.Random(11)
    for _ in range(3_000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(12, 19)))
        assert cards._luhn_valid(digits) == _luhn_by_digit(digits)
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for _ in range(3_000):
        country = rng.choice(["ES", "GB", "DE", "FR", "NL", "PT"])
        body = "".join(rng.choice(alphabet if country in ("GB", "NL", "FR") else "0123456789") for _ in range(30))
        compact = (country + f"{rng.randint(2, 98):02d}" + body)[: identifiers._IBAN_LENGTHS[country]]
        assert identifiers._iban_valid(compact) == (_mod97_by_character(compact) == 1)
    assert identifiers._iban_valid("ES9121000418450200051332")


# --- the layout helper ---------------------------------------------------------------------------------------
def test_split_alternatives_distributes_a_leading_group_in_order() -> None:
    assert split_alternatives(r"a|(?:b|c)d|e[|(]f|(?:g|h)?i") == ["a", "bd", "cd", "e[|(]f", "(?:g|h)?i"]


def test_by_first_char_keeps_each_branch_and_names_it() -> None:
    branches = ["me", "my", "mine", "i", "i'm", "he\\s+sido", "he"]
    pattern, order = by_first_char(branches, capture=True)
    compiled = re.compile(r"(?<!\w)" + pattern + r"\b")
    for text, branch in [("mine", "mine"), ("i'm", "i"), ("he sido", "he\\s+sido"), ("he", "he")]:
        match = compiled.match(text)
        assert match is not None
        assert branches[order[(match.lastindex or 0) - 1]] == branch
    with pytest.raises(ValueError, match="single literal"):
        by_first_char(["a?b"])


def _luhn_complete(body: str) -> str:
    """`body` with the check digit that makes it Luhn-valid."""
    return next(body + digit for digit in "0123456789" if _luhn_by_digit(body + digit))


def _random_run(rng: random.Random) -> str:
    separator = rng.choice([" ", " ", "  ", "-", ".", "/", "\t", " \t"])
    kind = rng.random()
    if kind < 0.4:  # a card number (valid or one digit off) in a card shape, maybe with a reference around it
        shape = rng.choice(cards._CARD_SHAPES)
        number = _luhn_complete(
            rng.choice("23456789") + "".join(rng.choice("0123456789") for _ in range(sum(shape) - 2))
        )
        if rng.random() < 0.5:
            number = number[:-1] + str((int(number[-1]) + 1) % 10)
        groups, at = [], 0
        for length in shape:
            groups.append(number[at : at + length])
            at += length
        groups = [str(rng.randrange(100))] * rng.randint(0, 1) + groups + [str(rng.randrange(1000))] * rng.randint(0, 2)
    elif kind < 0.5:  # round quantities
        groups = [f"{rng.randint(2, 9)}{rng.choice(['000', '100', '500'])}" for _ in range(rng.randint(4, 5))]
    elif kind < 0.6:  # one block
        groups = [_luhn_complete("".join(rng.choice("0123456789") for _ in range(rng.randint(12, 18))))]
    else:
        groups = [
            "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 4, 4, 6, 5])))
            for _ in range(rng.randint(1, 14))
        ]
    if rng.random() < 0.1:  # mixed separators
        return "".join(group + rng.choice([" ", "-", "."]) for group in groups)[:-1]
    return separator.join(groups)


def test_card_runs_judged_by_shape_agree_with_the_group_walk() -> None:
    """`_may_hold_card` (checks worked out once per run shape) is False exactly when the group walk of
    `_cards_in_run` finds no card."""
    rng = random.Random(5)
    judged = found = 0
    for _ in range(6_000):
        run = _random_run(rng)
        if not cards._DIGIT_RUN.fullmatch(run):
            continue
        walk = cards._cards_in_run(run)
        if len(run) <= cards._MAX_SHAPE_CHARS:
            judged += 1
            found += walk is not None
            assert cards._may_hold_card(run) == (walk is not None), run
        elif not cards._may_hold_card(run):
            assert walk is None
    assert judged > 4_000
    assert found > 500


# --- cues read only near the terms ------------------------------------------------------------------------------
def _long_texts(count: int, seed: int) -> Iterator[str]:
    """Labelled sentences joined into long notes, with prose and long runs of whitespace between them (a cue's
    `\\s+` may span a run that a window's edge falls in), never dense in clinical words."""
    rng = random.Random(seed)
    sentences = [json.loads(line)["text"] for line in HEALTH_SET.read_text(encoding="utf-8").splitlines() if line]
    prose = "we walked along the shore and talked about the plans for the weekend and the new bikes "
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(2, 12)):
            parts.append(rng.choice(sentences))
            parts.append(rng.choice([" ", ". ", "\n", " " * rng.randint(8, 200), "\n" + " " * rng.randint(8, 90)]))
            parts.append(prose * rng.randint(0, 4))
        yield "".join(parts)


# A cue across a long run of whitespace that a window's edge falls in: the subjectless verb's sentence mark
# lies more than the pad before the window.
_ACROSS_SPACE = [
    f"We talked about the trip.{gap}Been battling depression since college"
    for gap in (" " * 150, "\n" + " " * 300, "\t " * 90)
] + [f"Nothing new.{' ' * 120}Just diagnosed with diabetes, he said no", f"Ok.\n{' ' * 140}had covid last week"]


def test_cues_read_in_windows_are_those_of_a_whole_text_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [*CORPUS, *_long_texts(400, seed=7), *_ACROSS_SPACE]
    assert all(own_health.own_clinical_span_bounds(text) for text in _ACROSS_SPACE)
    windowed = [own_health.own_clinical_span_bounds(text) for text in texts]
    monkeypatch.setattr(own_health, "_windows", lambda bounds: [(0, 10**9)] if bounds else [])
    whole = [own_health.own_clinical_span_bounds(text) for text in texts]
    assert sum(bool(spans) for spans in whole) > 100  # the corpus exercises the rule
    mismatches = [text for text, a, b in zip(texts, windowed, whole, strict=True) if a != b]
    assert mismatches == []
