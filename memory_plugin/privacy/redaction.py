"""Sensitive-data filter run on every fact before it is stored.

Long-term memory is read back into prompts for months, so it must never hold payment data, national ids,
passwords or credentials, even when a user typed them or an extractor copied them. `redact_sensitive`
replaces each finding with a placeholder such as ``[redacted payment_card]`` and says what it found.

Checksums keep near misses intact: a part number that fails Luhn, an IBAN with a wrong check digit or a
DNI with the wrong control letter is ordinary text in a manufacturing conversation, not personal data.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Redaction", "contains_sensitive", "redact_sensitive"]


@dataclass(frozen=True)
class Redaction:
    """The result of `redact_sensitive`: the cleaned text and the kinds of data removed from it."""

    text: str
    """The input with each finding replaced by ``[redacted <kind>]``."""
    kinds: tuple[str, ...]
    """Kinds found, each once, in the order they are checked: "api_key", "iban", "national_id", "ssn",
    "payment_card", "password". Empty when nothing was redacted."""


def _placeholder(kind: str) -> str:
    return f"[redacted {kind}]"


# --- API keys and tokens ------------------------------------------------------------------------------------
# Checked first: keys are long alphanumeric runs that could otherwise be half-eaten by the number rules.
_API_KEY_PATTERNS: tuple[re.Pattern[str], ...] = (
    # OpenAI ("sk-", "sk-proj-", "sk-svcacct-") and Anthropic ("sk-ant-") secret keys; `\b` keeps "task-..." out.
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    # AWS access key ids (long-term AKIA, temporary ASIA): fixed prefix + 16 upper-case alphanumerics.
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # GitHub tokens: classic/OAuth/app prefixes and fine-grained personal access tokens.
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    # Slack bot/user/app tokens.
    re.compile(r"\bxox[bpars]-[A-Za-z0-9-]{10,}"),
    # JWTs (Supabase anon/service-role keys are JWTs): base64url JSON header and payload both start "eyJ".
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}"),
    # Supabase's newer opaque keys.
    re.compile(r"\bsb_(?:secret|publishable)_[A-Za-z0-9_-]{20,}"),
)

# A long token right after a word naming a credential ("api key", "token", "secret", "clave api"). The value
# must also look random (see `_looks_random`), so "the key is to keep tolerances tight" stays intact.
_KEYWORD_TOKEN = re.compile(
    r"\b(?:api[\s_-]?key|access[\s_-]?key|secret(?:[\s_-]?key)?|token|key"
    r"|clave(?:\s+(?:de\s+(?:la\s+)?)?api)?|api)\b"
    r"\s*(?:[:=]\s*|(?:is|es|was|era)\s+)?[\"'`]?"
    r"(?P<secret>[A-Za-z0-9_\-+/=.]{24,})",
    re.IGNORECASE,
)

# --- IBAN -----------------------------------------------------------------------------------------------------
# ISO 13616: country code, two check digits, then 11–30 alphanumerics (upper case, print format groups them by
# four with spaces). Validated with mod-97 before redacting, so invalid check digits pass.
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")

# --- Spanish national ids -------------------------------------------------------------------------------------
# Control letter of DNI/NIE: the number modulo 23 indexes this table (Real Decreto 1553/2005).
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
# DNI: 8 digits (optionally dotted "12.345.678") and the control letter, attached or after a dash; after a space
# only an upper-case letter counts, so "12345678 y 5" (Spanish "and") is never read as an id.
_DNI = re.compile(r"(?<![\w.])(?P<num>\d{2}\.?\d{3}\.?\d{3})(?:-?(?P<l1>[A-Za-z])|\s(?P<l2>[A-Z]))(?!\w)")
# NIE (foreigners): X/Y/Z standing for 0/1/2, 7 digits, control letter.
_NIE = re.compile(r"\b(?P<prefix>[XYZxyz])[ -]?(?P<num>\d{7})[ -]?(?P<letter>[A-Za-z])(?!\w)")

# --- US Social Security number ----------------------------------------------------------------------------------
# ddd-dd-dddd; the SSA never issues area 000, 666 or 900–999, nor group 00 or serial 0000.
_SSN = re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])")

# --- payment cards ----------------------------------------------------------------------------------------------
# A run of digit groups separated by single spaces or dashes, not glued to letters, decimals or other numbers.
# Card numbers (13–19 digits) are searched inside it and redacted only when Luhn-valid, so part numbers and
# quantities pass unchanged.
# Possessive quantifiers: a run glued to letters is skipped whole, never backtracked into mid-group.
_DIGIT_RUN = re.compile(r"(?<![\w.,-])\d++(?:[ -]\d++)*+(?!\w|[.,-]\d)")
_RUN_SEPARATOR = re.compile(r"[ -]")
_DIGIT_GROUP = re.compile(r"\d+")

# --- passwords ----------------------------------------------------------------------------------------------------
# "mi contraseña es X", "password: X", "la clave del portal es X", "my password for the ERP is X": a word naming
# a password, an optional "of/for <something>", a copula or colon, then the secret (quoted or one token).
_PASSWORD = re.compile(
    r"\b(?P<kw>contraseñas?|contrasenas?|passwords?|passwd|passcode|pin|claves?(?:\s+de\s+acceso)?)\b"
    r"(?:\s+(?:del?|de\s+la|para|for|of|to|on)\s+(?:(?:el|la|los|las|mi|the|my|our)\s+)?[\w.-]+(?:\s+[\w.-]+){0,3})?"
    r"\s*(?:[:=]|\s(?:es|era|sería|será|is|was|would\s+be)\b)\s*"
    r"(?:[\"'“«](?P<quoted>[^\"'”»\n]{1,100})[\"'”»]|(?P<bare>[^\s\"'“”«»]+))",
    re.IGNORECASE,
)
# "clave" also means "key/crucial" in Spanish ("la clave es el acabado"), so after it the value must look like a
# secret: contain a digit or a symbol, or mix case inside the word.
_AMBIGUOUS_PASSWORD_WORD = re.compile(r"^claves?$", re.IGNORECASE)
_SECRET_LIKE = re.compile(r"[\d\W_]|.[A-Z]")
# "pin" is also a mechanical part ("el pin es de acero", "the pin is 5mm"): only a 4–8 digit value is a PIN code.
_PIN_WORD = re.compile(r"^pin$", re.IGNORECASE)
_PIN_CODE = re.compile(r"^\d{4,8}$")
# Words that describe a password instead of being one ("la contraseña es incorrecta", "the password is stored").
_NOT_A_SECRET_WORDS = """
a an the not no too very still also now required correct incorrect wrong invalid valid secure weak strong
expired same different new old stored saved shared changed reset de del el la lo un una muy demasiado obligatoria
obligatorio correcta correcto incorrecta incorrecto válida válido inválida segura seguro débil fuerte caducada misma
mismo distinta nueva antigua guardada cambiada
"""
_NOT_A_SECRET = frozenset(_NOT_A_SECRET_WORDS.split())
# Trailing sentence punctuation is not part of a bare secret ("password: hunter2.").
_TRAILING_PUNCT = ".,;:)"


def _luhn_valid(digits: str) -> bool:
    """ISO/IEC 7812 check digit: double every second digit from the right, the sum must end in 0."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _iban_valid(candidate: str) -> bool:
    """ISO 13616 / ISO 7064 mod 97-10: rotate the first four characters to the end, letters to 10..35."""
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34 or not compact[2:4].isdigit() or not 2 <= int(compact[2:4]) <= 98:
        return False
    rotated = compact[4:] + compact[:4]
    numeric = "".join(str(int(c, 36)) for c in rotated)
    return int(numeric) % 97 == 1


def _looks_random(token: str) -> bool:
    """True for machine-generated tokens: several character classes and high Shannon entropy (bits/char)."""
    classes = sum(
        (
            any(c.islower() for c in token),
            any(c.isupper() for c in token),
            any(c.isdigit() for c in token),
        )
    )
    if classes < 2:
        return False
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    # Random base62 strings of 24+ chars score above 4; English words and repeated characters stay well below.
    return entropy >= 3.5


def _redact_api_keys(text: str) -> tuple[str, bool]:
    found = False
    for pattern in _API_KEY_PATTERNS:
        text, count = pattern.subn(_placeholder("api_key"), text)
        found = found or count > 0

    def keyword_token(match: re.Match[str]) -> str:
        nonlocal found
        secret = match.group("secret")
        if not _looks_random(secret):
            return match.group(0)
        found = True
        return match.group(0)[: match.start("secret") - match.start()] + _placeholder("api_key")

    text = _KEYWORD_TOKEN.sub(keyword_token, text)
    return text, found


def _redact_ibans(text: str) -> tuple[str, bool]:
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        candidate = match.group(0)
        # The regex may run into a following upper-case word ("... 1332 EUR"): try the longest prefix ending at
        # a group boundary that validates.
        ends = [i for i, c in enumerate(candidate) if c == " "] + [len(candidate)]
        for end in sorted(ends, reverse=True):
            if _iban_valid(candidate[:end]):
                found = True
                return _placeholder("iban") + candidate[end:]
        return candidate

    return _IBAN.sub(replace, text), found


def _redact_national_ids(text: str) -> tuple[str, bool]:
    found = False

    def dni(match: re.Match[str]) -> str:
        nonlocal found
        letter = (match.group("l1") or match.group("l2")).upper()
        if _DNI_LETTERS[int(match.group("num").replace(".", "")) % 23] != letter:
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

    text = _DNI.sub(dni, text)
    text = _NIE.sub(nie, text)
    return text, found


def _redact_ssns(text: str) -> tuple[str, bool]:
    text, count = _SSN.subn(_placeholder("ssn"), text)
    return text, count > 0


def _redact_cards(text: str) -> tuple[str, bool]:
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        run = match.group(0)
        groups = [(m.start(), m.end()) for m in _DIGIT_GROUP.finditer(run)]
        pieces: list[str] = []
        cursor = 0
        i = 0
        # Greedy, left to right: the longest span of whole groups with 13–19 digits that passes Luhn is a card.
        # A reference number or a year next to the card ("ref 12 4111 1111 1111 1111") does not hide it.
        while i < len(groups):
            for j in range(len(groups) - 1, i - 1, -1):
                start, end = groups[i][0], groups[j][1]
                digits = _RUN_SEPARATOR.sub("", run[start:end])
                if 13 <= len(digits) <= 19 and _luhn_valid(digits):
                    pieces.append(run[cursor:start] + _placeholder("payment_card"))
                    cursor = end
                    found = True
                    i = j
                    break
            i += 1
        pieces.append(run[cursor:])
        return "".join(pieces)

    return _DIGIT_RUN.sub(replace, text), found


def _redact_passwords(text: str) -> tuple[str, bool]:
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        group = "quoted" if match.group("quoted") is not None else "bare"
        secret = match.group(group)
        if group == "bare":
            secret = secret.rstrip(_TRAILING_PUNCT)
        keyword = match.group("kw")
        if not secret or secret.startswith("[redacted") or secret.casefold() in _NOT_A_SECRET:
            return match.group(0)
        if _AMBIGUOUS_PASSWORD_WORD.match(keyword) and not _SECRET_LIKE.search(secret):
            return match.group(0)
        if _PIN_WORD.match(keyword) and not _PIN_CODE.match(secret):
            return match.group(0)
        found = True
        start = match.start(group) - match.start()
        whole = match.group(0)
        return whole[:start] + _placeholder("password") + whole[start + len(secret) :]

    return _PASSWORD.sub(replace, text), found


# Order matters: specific shapes before generic ones, so an IBAN's digits are not taken for a card number.
_PASSES: tuple[tuple[str, Callable[[str], tuple[str, bool]]], ...] = (
    ("api_key", _redact_api_keys),
    ("iban", _redact_ibans),
    ("national_id", _redact_national_ids),
    ("ssn", _redact_ssns),
    ("payment_card", _redact_cards),
    ("password", _redact_passwords),
)


def redact_sensitive(text: str) -> Redaction:
    """Replace payment cards, IBANs, Spanish DNI/NIE, US SSNs, stated passwords and API keys in `text`.

    Each finding becomes ``[redacted <kind>]``; the rest of the text is kept as written:

    >>> redact_sensitive("Paga con la 4111 1111 1111 1111, gracias").text
    'Paga con la [redacted payment_card], gracias'
    """
    kinds: list[str] = []
    for kind, redact in _PASSES:
        text, found = redact(text)
        if found:
            kinds.append(kind)
    return Redaction(text=text, kinds=tuple(kinds))


def contains_sensitive(text: str) -> bool:
    """True when `redact_sensitive` would change `text`."""
    return bool(redact_sensitive(text).kinds)
