"""Bank and identity numbers: IBANs (mod 97 and the country's length), Spanish DNI/NIE (control letter) and US
SSNs (issued ranges and a word saying what they are)."""

from __future__ import annotations

import re
import string

from .scan import _byte_class, _has_run, _placeholder, _replaced, _sub_from

# --- IBAN -----------------------------------------------------------------------------------------------------
# ISO 13616: country code, two check digits, then 11–30 alphanumerics, in upper or lower case, compact or grouped
# by spaces or dashes. Validated with mod 97 and the country's length before redacting.
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?:[ -]?[A-Za-z0-9]){11,30}(?![A-Za-z0-9])")
# IBAN length by country (SWIFT IBAN registry). A known country must match its length exactly; an unknown one
# is accepted only written in capitals, between 15 and 34 characters.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29, "BY": 28,
    "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18,
    "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
    "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19,
    "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip

# --- Spanish national ids -------------------------------------------------------------------------------------
# Control letter of DNI/NIE: the number modulo 23 indexes this table (Real Decreto 1553/2005).
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
# DNI: 8 digits (optionally dotted "12.345.678") and the control letter, attached or after a dash, or after a
# space when a word naming the document comes just before ("DNI", "NIF", "documento"): a plan or order number
# followed by a revision letter ("Plano número 12345678 Z") matches the check letter once in 23.
# Written digit first (the look-behind checks the character before it), so the engine skips to the next digit.
_DNI = re.compile(r"(?P<num>\d(?<![\w.]\d)\d\.?\d{3}\.?\d{3})(?:-?(?P<l1>[A-Za-z])|[ \u00a0](?P<l2>[A-Z]))(?!\w)")
# NIE (foreigners): X/Y/Z standing for 0/1/2, 7 digits, control letter.
_NIE = re.compile(r"(?P<prefix>[XYZxyz])(?<!\w[XYZxyz])[ -]?(?P<num>\d{7})[ -]?(?P<letter>[A-Za-z])(?!\w)")
# Cheap scans without look-behind: most text has no 8-digit number, and no match of the full pattern can start
# before the first hit of its gate, so the full scan starts there.
_DNI_GATE = re.compile(r"\d{2}\.?\d{3}\.?\d{3}")
_NIE_GATE = re.compile(r"[XYZxyz][ -]?\d{7}")
_ID_CONTEXT = re.compile(
    r"\b(?:dni|nif|nie|documento|identidad|carn[eé]t|c[eé]dula|pasaporte|id\s+card|national\s+id|id\s+number)\b",
    re.IGNORECASE,
)
# How far before a number its context word may be ("mi DNI, que es el 12345678 Z" is 18 characters).
_CONTEXT_WINDOW = 40

# --- US Social Security number ----------------------------------------------------------------------------------
# Nine digits as ddd-dd-dddd, with spaces, dots or nothing between the groups; the SSA never issues area 000, 666
# or 900–999, nor group 00 or serial 0000. Only redacted with a word saying it is one nearby: order and ticket
# numbers have the same shape ("Pedido 123-45-6789").
_SSN = re.compile(r"(?<![\w.-])(?!000|666|9\d\d)\d{3}(?P<sep>[-. ]?)(?!00)\d{2}(?P=sep)(?!0000)\d{4}(?![\w-]|\.\d)")
_SSN_WORDS = ("ssn", "ss#", "soc", "seguro social", "itin", "taxpayer")
_SSN_CONTEXT = re.compile(
    r"\b(?:ssn|ss#|soc(?:ial)?\s*sec(?:urity)?|seguro\s+social|itin|taxpayer\s+id)", re.IGNORECASE
)

# ISO 13616 character values: digits as themselves, letters A=10 … Z=35 (as text, so a whole IBAN becomes one
# decimal number for `int`, computed in C instead of a Python loop per character).
_IBAN_DIGITS = str.maketrans({c: str(int(c, 36)) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"})


def _iban_valid(candidate: str) -> bool:
    """ISO 13616 / ISO 7064 mod 97-10: rotate the first four characters to the end, letters to 10..35."""
    compact = candidate.replace(" ", "").replace("-", "")
    country = compact[:2].upper()
    expected = _IBAN_LENGTHS.get(country)
    if expected is None:
        # An unknown country code in lower case is more likely a word glued to a number than an IBAN.
        if not compact[:2].isupper() or not 15 <= len(compact) <= 34:
            return False
    elif len(compact) != expected:
        return False
    check = compact[2:4]
    if check.isascii():
        # Two ASCII characters compare as the number they spell when both are digits.
        if not (check.isdigit() and "02" <= check <= "98"):
            return False
    elif not check.isdigit() or not 2 <= int(check) <= 98:
        return False
    rotated = (compact[4:] + compact[:4]).upper()
    if not (rotated.isascii() and rotated.isalnum()):
        return False  # only 0-9 and A-Z have values
    # Most countries' account part is digits only: then only the last four characters (country and check digits)
    # need translating (a translation table costs ~0.1 µs per character).
    head = rotated[:-4]
    number = head + rotated[-4:].translate(_IBAN_DIGITS) if head.isdigit() else rotated.translate(_IBAN_DIGITS)
    return int(number) % 97 == 1


# `\d` also matches other scripts' digits, and `_SPACES` holds non-ASCII spaces: non-ASCII bytes may be members.
_DIGIT_BYTES = _byte_class(string.digits, non_ascii=True)
_DIGIT_OR_DOT_BYTES = _byte_class(string.digits + ".", non_ascii=True)
# An IBAN starts with two ASCII letters and two digits.
_LETTER_DIGIT_SHAPE = bytes.maketrans(
    (string.ascii_letters + string.digits).encode() + bytes(range(0x80, 0x100)),
    b"a" * 52 + b"d" * 10 + b"d" * 0x80,
)


def _has_context(text: str, start: int, pattern: re.Pattern[str]) -> bool:
    """Whether a word matching `pattern` ends within `_CONTEXT_WINDOW` characters before `start`."""
    return pattern.search(text, max(0, start - _CONTEXT_WINDOW), start) is not None


def _end_of_compact(candidate: str, length: int) -> int | None:
    """Where `candidate` holds `length` characters besides separators, if that is the end of a group."""
    # An `_IBAN` match is four characters, then single separators each followed by one character.
    pattern = _COMPACT_PREFIXES.get(length) or _compact_prefix(length)
    prefix = pattern.match(candidate)
    if prefix is None:
        return None
    end = prefix.end()
    return end if end == len(candidate) or candidate[end] in " -" else None


def _compact_prefix(length: int) -> re.Pattern[str]:
    """The first `length` characters of an `_IBAN` match besides its separators."""
    return re.compile(r"[^ -]{4}(?:[ -]?[^ -]){" + str(max(0, length - 4)) + "}")


# One per IBAN length of the registry, compiled up front (a dict lookup per candidate).
_COMPACT_PREFIXES = {length: _compact_prefix(length) for length in set(_IBAN_LENGTHS.values())}


def _redact_ibans(text: str) -> tuple[str, bool]:
    if b"aadd" not in text.encode("utf-8", "surrogatepass").translate(_LETTER_DIGIT_SHAPE):
        return text, False

    def iban(match: re.Match[str]) -> str | None:
        candidate = match.group()
        # The regex may run into a following word ("... 1332 EUR"): try the longest prefix ending at a group
        # boundary that validates (at most 31 boundaries, so this stays linear).
        expected = _IBAN_LENGTHS.get(candidate[:2].upper())
        if expected is not None:
            end = _end_of_compact(candidate, expected)
            if end is None or not _iban_valid(candidate[:end]):
                return None
        else:
            ends = sorted([i for i, c in enumerate(candidate) if c in " -"] + [len(candidate)], reverse=True)
            end = next((end for end in ends if _iban_valid(candidate[:end])), -1)
            if end < 0:
                return None
        return _placeholder("iban") + candidate[end:]

    # Near misses (most candidates) return None: they cost no string building.
    redacted = _replaced(text, _IBAN.finditer(text), iban)
    return redacted, redacted is not text


def _redact_national_ids(text: str) -> tuple[str, bool]:
    found = False

    def dni(match: re.Match[str]) -> str:
        nonlocal found
        spaced = match.group("l2") is not None
        letter = (match.group("l1") or match.group("l2")).upper()
        if _DNI_LETTERS[int(match.group("num").replace(".", "")) % 23] != letter:
            return match.group(0)
        if spaced and not _has_context(text, match.start(), _ID_CONTEXT):
            return match.group(0)
        found = True
        return _placeholder("national_id")

    def nie(match: re.Match[str]) -> str:
        nonlocal found
        number = "XYZ".index(match.group("prefix").upper()) * 10_000_000 + int(match.group("num"))
        if _DNI_LETTERS[number % 23] != match.group("letter").upper():
            return match.group(0)
        found = True
        return _placeholder("national_id")

    # A DNI holds 8 digits (dots between them), a NIE 7 in a row.
    gate = _DNI_GATE.search(text) if _has_run(text, _DIGIT_OR_DOT_BYTES, 8) else None
    if gate is not None:
        text = _sub_from(_DNI, dni, text, gate.start())
    gate = _NIE_GATE.search(text) if _has_run(text, _DIGIT_BYTES, 7) else None
    if gate is not None:
        text = _sub_from(_NIE, nie, text, gate.start())
    return text, found


def _redact_ssns(text: str) -> tuple[str, bool]:
    lowered = text.lower()
    if not any(word in lowered for word in _SSN_WORDS):
        return text, False  # no word naming an SSN anywhere: nothing can qualify
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        if not _has_context(text, match.start(), _SSN_CONTEXT):
            return match.group(0)
        found = True
        return _placeholder("ssn")

    return _SSN.sub(replace, text), found


# --- passports and other countries' ids ----------------------------------------------------------------------
# A passport number (6-10 letters and digits, at least 4 digits) right after a word naming the document; a UK
# National Insurance number (two prefix letters the HMRC issues, three digit pairs, a suffix A-D, upper case);
# a Brazilian CPF with its two check digits, written "123.456.789-09" or after the word "CPF".
_PASSPORT = re.compile(
    r"\b(?i:passport|pasaporte|passeport|reisepass)(?:\s+(?i:number|no\.?|n[ºo°]\.?|num(?:ero|ber)?|#))?"
    r"\s*+(?:[:=#]|\b(?:is|es|was|era)\b)?\s*+(?P<id>[A-Za-z0-9]{6,10})\b"
)
_NINO = re.compile(r"\b(?P<prefix>[A-Z]{2})(?P<sep> ?)\d{2}(?P=sep)\d{2}(?P=sep)\d{2}(?P=sep)[A-D]\b")
# Letters the HMRC issues as a prefix: a part number shaped like one ("AB123456C") is taken for a NINO only spaced
# in pairs or after a word naming it.
_NINO_PREFIX = re.compile(r"[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]")
_NINO_CONTEXT = re.compile(r"\b(?:national\s+insurance|nino|ni\s+(?:number|no))\b", re.IGNORECASE)
_CPF = re.compile(r"(?<![\d.])(?P<num>\d{3}(?P<dot>\.?)\d{3}(?P=dot)\d{3}-?\d{2})(?![\d-])")
_PASSPORT_WORDS = ("passport", "pasaporte", "passeport", "reisepass")
# The suffix letter after a digit: a character class first, so the engine skips digits and other letters in C.
_NINO_GATE = re.compile(r"[A-D](?:(?<=\d[A-D])|(?<=\d [A-D]))(?!\w)")
# The written CPF's ".ddd-dd" end: a literal first, so the engine jumps between dots.
_CPF_GATE = re.compile(r"\.\d{3}-\d{2}(?![\d-])")
_CPF_CONTEXT = re.compile(r"\bcpf\b", re.IGNORECASE)


def _cpf_valid(number: str) -> bool:
    """The two mod-11 check digits of a Brazilian CPF (all-equal digits are never issued)."""
    digits = [int(c) for c in number if c.isdigit()]
    if len(digits) != 11 or len(set(digits)) == 1:
        return False
    for size in (9, 10):
        check = sum(d * w for d, w in zip(digits[:size], range(size + 1, 1, -1), strict=True)) * 10 % 11 % 10
        if check != digits[size]:
            return False
    return True


def _redact_other_ids(text: str) -> tuple[str, bool]:
    found = False

    def passport(match: re.Match[str]) -> str:
        nonlocal found
        value = match.group("id")
        if sum(c.isdigit() for c in value) < 4:
            return match.group(0)
        found = True
        start = match.start("id") - match.start()
        return match.group(0)[:start] + _placeholder("national_id")

    def nino(match: re.Match[str]) -> str:
        nonlocal found
        if not _has_context(text, match.start(), _NINO_CONTEXT) and not (
            match.group("sep") and _NINO_PREFIX.fullmatch(match.group("prefix"))
        ):
            return match.group(0)
        found = True
        return _placeholder("national_id")

    def cpf(match: re.Match[str]) -> str:
        nonlocal found
        written = match.group("num")
        if not ("." in written and "-" in written) and not _has_context(text, match.start(), _CPF_CONTEXT):
            return written
        if not _cpf_valid(written):
            return written
        found = True
        return _placeholder("national_id")

    lowered = text.lower()
    if any(word in lowered for word in _PASSPORT_WORDS):
        text = _PASSPORT.sub(passport, text)
    # The gates start with a digit (the engine skips to the next one in C); the full patterns run from the first
    # hit on: a NINO's prefix is at most 3 characters before its digits.
    gate = _NINO_GATE.search(text) if _has_run(text, _DIGIT_BYTES, 2) else None
    if gate is not None:
        text = _sub_from(_NINO, nino, text, max(0, gate.start() - 12))
    if "cpf" in lowered:
        text = _CPF.sub(cpf, text)
    elif (gate := _CPF_GATE.search(text)) is not None:
        text = _sub_from(_CPF, cpf, text, max(0, gate.start() - 11))
    return text, found
