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

import functools
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
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


# Horizontal spaces people and word processors put between digit groups: space, tab, no-break space (U+00A0),
# figure space (U+2007), narrow no-break space (U+202F).
_SPACES = " \t\u00a0\u2007\u202f"

# --- API keys and tokens ------------------------------------------------------------------------------------
# Checked first: keys are long alphanumeric runs that could otherwise be half-eaten by the number rules.
# Each with the literals one of which it must contain: a literal search costs ~0.02 ms on 20,000 characters, a
# regex scan ~0.3 ms, so a pattern runs only on text holding its prefix.
_API_KEY_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    # OpenAI ("sk-", "sk-proj-", "sk-svcacct-") and Anthropic ("sk-ant-") secret keys; `\b` keeps "task-..." out.
    (("sk-",), re.compile(r"\bsk-[A-Za-z0-9_-]{20,}+")),
    # Stripe secret and restricted keys (live and test) and webhook signing secrets.
    (("sk_live_", "sk_test_", "rk_live_", "rk_test_"), re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}+")),
    (("whsec_",), re.compile(r"\bwhsec_[A-Za-z0-9]{20,}+")),
    # Google API keys: "AIza" and 35 URL-safe characters.
    (("AIza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")),
    # AWS access key ids (long-term AKIA, temporary ASIA): fixed prefix + 16 upper-case alphanumerics.
    (("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    # GitHub tokens: classic/OAuth/app prefixes and fine-grained personal access tokens.
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}+")),
    (("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}+")),
    # Slack bot/user/app tokens.
    (("xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"), re.compile(r"\bxox[bpars]-[A-Za-z0-9-]{10,}+")),
    # JWTs (Supabase anon/service-role keys are JWTs): base64url JSON header and payload both start "eyJ".
    (("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{10,}+")),
    # Supabase's newer opaque keys.
    (("sb_secret_", "sb_publishable_"), re.compile(r"\bsb_(?:secret|publishable)_[A-Za-z0-9_-]{20,}+")),
)

# Each pattern with the character all its literals hold ("" when they share none).
_API_KEY_GATES = tuple(
    (next((c for c in "_-" if all(c in literal for literal in literals)), ""), literals, pattern)
    for literals, pattern in _API_KEY_PATTERNS
)

# AWS secret access keys: exactly 40 base64 characters. Checked for randomness and for upper case, lower case
# and a digit together, so a git SHA-1 (40 lower-case hex digits) or a long word is not taken for one.
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")

# A long token right after a word naming a credential ("api key", "token", "secret", "clave api"). The value
# must also look random (see `_looks_random`), so "the key is to keep tolerances tight" stays intact.
_KEYWORD_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?:api[\s_-]?key|access[\s_-]?key|secret(?:[\s_-]?(?:access[\s_-]?)?key)?|token|key"
    r"|clave(?:\s+(?:de\s+(?:la\s+)?)?api)?|api)\b"
    r"\s*+(?:[:=]\s*|(?:is|es|was|era)\s+)?[\"'`]?"
    r"(?P<secret>[A-Za-z0-9_\-+/=.]{24,}+)",
    re.IGNORECASE,
)

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

# --- payment cards ----------------------------------------------------------------------------------------------
# A run of digit groups, each separated by one to three spaces (any of `_SPACES`), a dash, a dot or a slash.
# Possessive: the run is read once, never backtracked into. Letters around it do not matter ("visa4111…").
_SEPARATOR = r"(?:[" + _SPACES + r"]{1,3}+|[-./])"
# The look-ahead asks for 13 characters of digits and separators before the run is handed to Python: short
# numbers (quantities, dates, phone numbers) never cost a callback. (A look-ahead counting 13 digits across
# separators cost 4 ms per 20,000 characters of "SSN 123 45 678"; this one is a single character class.)
# The first digit comes before the look-ahead so the engine skips to the next digit in C instead of trying
# every position (20,000 characters of prose: ~0.05 ms instead of ~0.4).
_DIGIT_RUN = re.compile(r"\d(?=[\d" + _SPACES + r"./-]{12})\d*+(?:" + _SEPARATOR + r"\d++)*+")
# A run of more than this many groups is a table of figures ("Cotas 100 200 … 800", a price list): not searched.
# Cards are written in at most 5 groups; 12 leaves room for a reference before and an expiry and CVV after.
_MAX_CARD_RUN_GROUPS = 12
_GROUP_SPLIT = re.compile(r"(\d++)")
# How card numbers are grouped when written: every group of four with a shorter last one (13–19 digits: Visa,
# Mastercard, Discover, Maestro), 4-6-5 (American Express) and 4-6-4 (Diners), or one block.
_CARD_SHAPES: tuple[tuple[int, ...], ...] = (
    (4, 4, 4, 4, 3),
    (4, 4, 4, 4, 2),
    (4, 4, 4, 4, 1),
    (4, 4, 4, 4),
    (4, 6, 5),
    (4, 6, 4),
    (4, 4, 4, 3),
    (4, 4, 4, 2),
    (4, 4, 4, 1),
)
# Issuers' major industry identifiers 2–6 (Mastercard 2/5, Amex/Diners/JCB 3, Visa 4, Discover/Maestro/UnionPay
# 6): a Luhn-valid number starting with 0, 1, 7, 8 or 9 is an airline, fuel or health id, or a part number.
_CARD_FIRST_DIGITS = frozenset("23456")

# --- passwords ----------------------------------------------------------------------------------------------------
# "mi contraseña es X", "password: X", "password is: X", "las contraseñas son X", "la clave del portal es X",
# "my password for the ERP is X": a word naming a password, an optional "of/for <something>", a copula and/or a
# colon, then the secret (quoted or one token).
_PASSWORD = re.compile(
    r"\b(?P<kw>contraseñas?|contrasenas?|passwords?|passwd|passcode|pin|claves?(?:\s+de\s+acceso)?)\b"
    r"(?:\s++(?:del?|de\s+la|para|for|of|to|on)\s++(?:(?:el|la|los|las|mi|the|my|our)\s+)?[\w.-]++"
    r"(?:\s++[\w.-]++){0,3}?)?"
    r"(?:\s++(?:es|era|sería|será|son|eran|is|was|are|were|would\s+be)\b\s*+[:=]?|\s*+[:=])\s*+"
    r"(?:[\"'“«](?P<quoted>[^\"'”»\n]{1,100})[\"'”»]|(?P<bare>[^\s\"'“”«»]++))"
    # Plural keywords list several: "las contraseñas son Abc123 y Xyz789" (up to five more values).
    r"(?P<more>(?:(?:\s*+,\s*+|\s++(?:(?:y|e|and|or|o)\s++)?)[^\s\"'“”«»,]++){0,5}+)",
    re.IGNORECASE,
)
_MORE_VALUES = re.compile(r"[^\s\"'“”«»,]++")
_LIST_WORDS = frozenset({"y", "e", "and", "or", "o"})
# Abbreviations that are also ordinary words ("pass", "pw"): a password only before a colon or an equals sign.
_SHORT_PASSWORD = re.compile(
    r"\b(?P<kw>pwd|pass|pw|pswd)\s*+[:=]\s*+(?:[\"'“«](?P<quoted>[^\"'”»\n]{1,100})[\"'”»]|(?P<bare>[^\s\"'“”«»]++))",
    re.IGNORECASE,
)
# "login juan / X", "usuario: juan / X", "user juan/X": a user name, a slash, the password.
_LOGIN_PAIR = re.compile(
    r"\b(?P<kw>login|log\s+in|usuario|user(?:name)?|credenciales|credentials)\s*+[:=]?\s*+[\w.@+-]{1,64}+"
    r"[ \t]*+/[ \t]*+(?P<bare>[^\s\"'“”«»/]++)",
    re.IGNORECASE,
)
# "clave" also means "key/crucial" in Spanish ("la clave es el acabado"), so after it the value must look like a
# secret: contain a digit or a symbol, or mix case inside the word. The same holds for the login pair's value.
_AMBIGUOUS_PASSWORD_WORD = re.compile(r"^(?:claves?|login|log\s+in|usuario|user(?:name)?|credenciales|credentials)$",
                                      re.IGNORECASE)  # fmt: skip
_SECRET_LIKE = re.compile(r"[\d\W_]|.[A-Z]")
# "pin" is also a mechanical part ("el pin es de acero", "the pin is 5mm"): only a 4–8 digit value is a PIN code.
_PIN_WORD = re.compile(r"^pin$", re.IGNORECASE)
_PIN_CODE = re.compile(r"^\d{4,8}$")
# Words that describe a password instead of being one ("la contraseña es incorrecta", "the password is stored").
_NOT_A_SECRET_WORDS = """
a an the not no too very still also now required correct incorrect wrong invalid valid secure weak strong
expired same different new old stored saved shared changed reset de del el la lo un una muy demasiado obligatoria
obligatorio correcta correcto incorrecta incorrecto válida válido inválida segura seguro débil fuerte caducada misma
mismo distinta nueva antigua guardada cambiada las los unas unos iguales distintas nuevas antiguas
"""
_NOT_A_SECRET = frozenset(_NOT_A_SECRET_WORDS.split())
# Trailing sentence punctuation is not part of a bare secret ("password: hunter2.").
_TRAILING_PUNCT = ".,;:)"


# Each digit doubled and its digits summed (2d or 2d - 9) is again one digit: a byte translation table, so the
# sum runs over bytes in C.
_LUHN_DOUBLED = bytes.maketrans(b"0123456789", "".join(str(2 * d if d < 5 else 2 * d - 9) for d in range(10)).encode())


def _luhn_valid(digits: str) -> bool:
    """ISO/IEC 7812 check digit: double every second digit from the right, the sum must end in 0."""
    if not digits.isascii():
        digits = "".join(str(int(c)) for c in digits)  # other scripts' digits ("٤١١١…") as ASCII
    encoded = digits.encode()
    total = sum(encoded[-1::-2]) + sum(encoded[-2::-2].translate(_LUHN_DOUBLED)) - 48 * len(encoded)
    return total % 10 == 0


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


def _byte_class(members: str, *, non_ascii: bool) -> bytes:
    """A `bytes.translate` table marking the bytes of `members` (ASCII) and, with `non_ascii`, every byte of a
    non-ASCII character's UTF-8 encoding, as 1; every other byte as 0."""
    return bytes(1 if chr(b) in members or (non_ascii and b >= 0x80) else 0 for b in range(256))


def _has_run(text: str, table: bytes, length: int) -> bool:
    """Whether `text` may hold `length` characters in a row of the class `table` marks (`_byte_class`).

    A necessary condition checked in C (~0.03 ms for 20,000 characters, a regex scan ~0.3 ms): a non-ASCII
    character is several bytes, so with `non_ascii` a run may look longer than it is, never shorter."""
    return b"\x01" * length in text.encode("utf-8", "surrogatepass").translate(table)


_BASE64_BYTES = _byte_class(string.ascii_letters + string.digits + "/+", non_ascii=False)
# `\d` also matches other scripts' digits, and `_SPACES` holds non-ASCII spaces: non-ASCII bytes may be members.
_DIGIT_BYTES = _byte_class(string.digits, non_ascii=True)
_DIGIT_OR_DOT_BYTES = _byte_class(string.digits + ".", non_ascii=True)
_DIGIT_RUN_BYTES = _byte_class(string.digits + _SPACES + "./-", non_ascii=True)
# An IBAN starts with two ASCII letters and two digits.
_LETTER_DIGIT_SHAPE = bytes.maketrans(
    (string.ascii_letters + string.digits).encode() + bytes(range(0x80, 0x100)),
    b"a" * 52 + b"d" * 10 + b"d" * 0x80,
)


def _trigger(words: tuple[str, ...]) -> re.Pattern[str]:
    """A literal alternation (longest first) found fast in lower-case text: where a keyword pattern may start."""
    return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


_API_TRIGGER = _trigger(("api", "access", "secret", "token", "key", "clave"))
_PASSWORD_TRIGGER = _trigger(
    ("contrase", "contrasen", "pass", "pin", "clave", "pw", "pswd", "login", "log", "usuario", "user", "credencial")
)


def _trigger_starts(text: str, trigger: re.Pattern[str]) -> list[int] | None:
    """Where `trigger` matches the lower-cased `text`, or None when lower-casing moves positions (a few
    characters, "İ", lower-case to two)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        return None
    return [hit.start() for hit in trigger.finditer(lowered)]


def _sub_at_triggers(
    text: str,
    trigger: re.Pattern[str],
    pattern: re.Pattern[str],
    replace: Callable[[re.Match[str]], str],
    starts: list[int] | None = None,
) -> str:
    """`pattern.sub(replace, text)`, trying `pattern` only where `trigger` matches the lower-cased text
    (`starts`: those places, when the caller has found them already with `_trigger_starts`).

    A keyword pattern with `\\b` and IGNORECASE scans 20,000 characters in ~0.7 ms; the literal trigger in
    ~0.15 ms, and the pattern then runs anchored at the few places a keyword starts."""
    if starts is None:
        starts = _trigger_starts(text, trigger)
    if starts is None:
        return pattern.sub(replace, text)

    def anchored() -> Iterator[re.Match[str]]:
        cursor = 0
        for start in starts:
            if start >= cursor and (match := pattern.match(text, start)) is not None:
                cursor = match.end()
                yield match

    return _replaced(text, anchored(), replace)


def _sub_from(pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str], text: str, pos: int) -> str:
    """`pattern.sub(replace, text)` for a pattern that has no match starting before `pos`."""
    return _replaced(text, pattern.finditer(text, pos), replace)


def _replaced(text: str, matches: Iterable[re.Match[str]], replace: Callable[[re.Match[str]], str | None]) -> str:
    """`text` with each of `matches` (in order, not overlapping) replaced by `replace(match)`; a match for which
    `replace` returns None stays as written (and costs no string building). `text` itself when none changed."""
    pieces: list[str] = []
    cursor = 0
    for match in matches:
        replacement = replace(match)
        if replacement is None:
            continue
        pieces.append(text[cursor : match.start()])
        pieces.append(replacement)
        cursor = match.end()
    if not pieces:
        return text
    pieces.append(text[cursor:])
    return "".join(pieces)


def _has_context(text: str, start: int, pattern: re.Pattern[str]) -> bool:
    """Whether a word matching `pattern` ends within `_CONTEXT_WINDOW` characters before `start`."""
    return pattern.search(text, max(0, start - _CONTEXT_WINDOW), start) is not None


def _redact_api_keys(text: str) -> tuple[str, bool]:
    found = False
    # Most key prefixes hold "_" or "-": text without one skips their literal searches (~0.01 ms each).
    present = {char: char in text for char in "_-"}
    for required, literals, pattern in _API_KEY_GATES:
        if required and not present[required]:
            continue
        if any(literal in text for literal in literals):
            text, count = pattern.subn(_placeholder("api_key"), text)
            found = found or count > 0

    def aws_secret(match: re.Match[str]) -> str:
        nonlocal found
        token = match.group(0)
        mixed = any(c.isupper() for c in token) and any(c.islower() for c in token) and any(c.isdigit() for c in token)
        if not mixed or not _looks_random(token):
            return token
        found = True
        return _placeholder("api_key")

    def keyword_token(match: re.Match[str]) -> str:
        nonlocal found
        secret = match.group("secret")
        if not _looks_random(secret):
            return match.group(0)
        found = True
        return match.group(0)[: match.start("secret") - match.start()] + _placeholder("api_key")

    if _has_run(text, _BASE64_BYTES, 40):
        text = _AWS_SECRET.sub(aws_secret, text)
    text = _sub_at_triggers(text, _API_TRIGGER, _KEYWORD_TOKEN, keyword_token)
    return text, found


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


def _separator_class(separator: str) -> str:
    """Spaces of any kind and count are one class; a dash, a dot and a slash are each their own."""
    return separator if len(separator) == 1 and separator in "-./" else " "


# Per group, the shape ends that may start there (None: too few digits left); and the groups where some may.
_Plan = tuple[tuple[tuple[int, ...] | None, ...], tuple[int, ...]]
# The plans of the run shapes seen so far (a dict lookup costs less than a cached call); at most `_MAX_PLANS`.
_PLANS: dict[tuple[int, ...], _Plan] = {}
_MAX_PLANS = 4_096


def _run_plan(lengths: tuple[int, ...]) -> _Plan:
    """What may start at each group of a run whose groups have these lengths: None when fewer than 13 digits
    remain from it (no card starts there or later), else the index of the last group of each card shape that
    fits there, longest first: `(i,)` for a single 13–19 digit block, `()` for none. Then the groups where
    something may start.

    Tries the fixed `_CARD_SHAPES` (longest first), then a single 13–19 digit block: a constant number of checks
    per group, so a run of n groups costs O(n), where trying every span of groups cost O(n²) Luhn checks. The
    plan depends on the lengths alone (a handful of shapes in practice), so it is worked out once per shape."""
    plan: list[tuple[int, ...] | None] = []
    for i, length in enumerate(lengths):
        if sum(lengths[i:]) < 13:
            plan.append(None)
        elif 13 <= length <= 19:
            plan.append((i,))
        elif length != 4 or i + 2 >= len(lengths) or lengths[i + 1] not in (4, 6):
            plan.append(())  # every grouped shape starts with 4 then 4 or 6 digits, and has at least 3 groups
        else:
            plan.append(tuple(i + len(shape) - 1 for shape in _shapes_starting(lengths[i : i + 5])))
    result = (tuple(plan), tuple(i for i, ends in enumerate(plan) if ends))
    if len(_PLANS) < _MAX_PLANS:
        _PLANS[lengths] = result
    return result


def _card_at(pieces: list[str], separators: list[str], i: int, ends: tuple[int, ...], uniform: bool) -> int | None:
    """The index of the last group of a card number starting at group `i` (trying the shape ends `ends` of
    `_run_plan`), or None. `uniform`: every separator of the run is the same."""
    if not ends or pieces[i][0] not in _CARD_FIRST_DIGITS:
        return None
    if ends[0] == i:
        return i if _luhn_valid(pieces[i]) else None
    for j in ends:
        between = separators[i:j]
        if not uniform and len(set(between)) > 1 and len({_separator_class(sep) for sep in between}) != 1:
            continue  # "4111 1111-1111.1111": mixed separators are a list of numbers, not one card
        card = pieces[i : j + 1]
        if _luhn_valid("".join(card)) and not _round_groups(card):
            return j
    return None


@functools.cache
def _shapes_starting(lengths: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The card shapes (longest first) that the group lengths `lengths` begin with; cached per tuple."""
    return tuple(shape for shape in _CARD_SHAPES if lengths[: len(shape)] == shape)


def _round_groups(pieces: list[str]) -> bool:
    """Quantities such as "2000 3000 4000 5000" (every group ending in 00): Luhn-valid by chance one time in ten,
    a real card's groups all end in 00 one time in 10⁸."""
    return len(pieces) > 1 and all(piece.endswith("00") for piece in pieces)


def _redact_cards(text: str) -> tuple[str, bool]:
    if not _has_run(text, _DIGIT_RUN_BYTES, 13):
        return text, False

    def cards(match: re.Match[str]) -> str | None:
        run = match.group()
        return _cards_in_run(run) if _may_hold_card(run) else None

    # Most runs are not cards (a table of figures, part numbers): they return None and cost no string building.
    redacted = _replaced(text, _DIGIT_RUN.finditer(text), cards)
    return redacted, redacted is not text


# A run's shape: each ASCII digit as "d", the separators as written ("dddd dddd-dd"). Runs of one shape have
# the same groups, the same card candidates and the same separator checks, so those are worked out once per
# shape (`_shape_checks`) and a run costs a dict lookup and its checksums.
_SHAPE_DIGITS = bytes.maketrans(b"0123456789", b"dddddddddd")
# Longer runs (rare: tables of figures) take the general path, so the cached shapes stay small.
_MAX_SHAPE_CHARS = 64
# Per group where a card may start: the offset of its first digit, and each candidate card as the offsets of its
# digits, the separator characters to delete between them, and the offsets where its groups end (None for a
# single 13-19 digit block, which is never taken for round quantities).
_Candidate = tuple[int, int, str, tuple[int, ...] | None]
_ShapeChecks = tuple[tuple[int, tuple[_Candidate, ...]], ...]
_SHAPES: dict[bytes, _ShapeChecks] = {}


def _may_hold_card(run: str) -> bool:
    """False when no card number can be in `run`: each candidate of its shape fails Luhn or is a list of round
    quantities. True when one passes (`_cards_in_run` then rewrites the run) or the run is not plain ASCII or
    too long to look up by shape. The same checks as `_card_at`, without splitting the run."""
    if len(run) > _MAX_SHAPE_CHARS or not run.isascii():
        return True
    shape = run.encode().translate(_SHAPE_DIGITS)
    checks = _SHAPES.get(shape)
    if checks is None:
        checks = _shape_checks(shape.decode())
        if len(_SHAPES) < _MAX_PLANS:
            _SHAPES[shape] = checks
    for first, candidates in checks:
        if run[first] not in _CARD_FIRST_DIGITS:
            continue
        for start, end, delete, group_ends in candidates:
            digits = run[start:end]
            for char in delete:
                digits = digits.replace(char, "")
            if _luhn_valid(digits) and (group_ends is None or not all(run[e - 2 : e] == "00" for e in group_ends)):
                return True
    return False


def _shape_checks(shape: str) -> _ShapeChecks:
    """The card candidates of every run of this shape (see `_SHAPES`), in the order `_cards_in_run` tries them."""
    split = _split_run(shape.replace("d", "0"))
    if split is None:
        return ()  # more groups than a card run holds: no card
    pieces, separators, uniform = split
    lengths = tuple(map(len, pieces))
    ends_at, starts = _PLANS.get(lengths) or _run_plan(lengths)
    offsets = [0]
    for length, separator in zip(lengths, separators, strict=False):
        offsets.append(offsets[-1] + length + len(separator))
    checks: list[tuple[int, tuple[_Candidate, ...]]] = []
    for i in starts:
        candidates: list[_Candidate] = []
        for j in ends_at[i] or ():
            if j == i:  # one 13-19 digit block
                candidates.append((offsets[i], offsets[i] + lengths[i], "", None))
                continue
            between = separators[i:j]
            if not uniform and len(set(between)) > 1 and len({_separator_class(sep) for sep in between}) != 1:
                continue  # mixed separators: never a card
            ends = tuple(offsets[k] + lengths[k] for k in range(i, j + 1))
            candidates.append((offsets[i], ends[-1], "".join(sorted(set("".join(between)))), ends))
        checks.append((offsets[i], tuple(candidates)))
    return tuple(checks)


def _split_run(run: str) -> tuple[list[str], list[str], bool] | None:
    """A run's digit groups, the separators between them and whether those are all one single space; None when
    it has more groups than a card run may hold (`_MAX_CARD_RUN_GROUPS`)."""
    if "  " not in run and run.replace(" ", "").isdigit():
        # Groups between single spaces, the way people write cards: a plain split (~0.3 µs instead of ~0.8).
        pieces = run.split(" ", _MAX_CARD_RUN_GROUPS)
        if len(pieces) > _MAX_CARD_RUN_GROUPS:
            return None
        return pieces, [" "] * (len(pieces) - 1), True
    # A split on a capturing digit pattern gives ["", group, separator, group, …, group, ""] in one call; it stops
    # after one group more than a card run may hold (then the last item is the rest of the run).
    parts = _GROUP_SPLIT.split(run, _MAX_CARD_RUN_GROUPS + 1)
    if len(parts) > 2 * _MAX_CARD_RUN_GROUPS + 1:
        return None
    return parts[1::2], parts[2:-1:2], False


def _cards_in_run(run: str) -> str | None:
    """`run` (digit groups and separators) with each card number in it replaced, or None when it holds none."""
    split = _split_run(run)
    if split is None:
        return None
    pieces, separators, uniform = split
    lengths = tuple(map(len, pieces))
    ends_at, starts = _PLANS.get(lengths) or _run_plan(lengths)
    # Most runs hold no card: only the groups where a card may start are tried, and the first card found starts
    # the left-to-right walk (every group before it stays as written).
    for i in starts:
        if pieces[i][0] in _CARD_FIRST_DIGITS:
            last = _card_at(pieces, separators, i, ends_at[i] or (), uniform)
            if last is not None:
                return _with_cards(pieces, separators, uniform, ends_at, i, last)
    return None


def _with_cards(
    pieces: list[str],
    separators: list[str],
    uniform: bool,
    ends_at: tuple[tuple[int, ...] | None, ...],
    first: int,
    first_last: int,
) -> str:
    """The run with its cards replaced, the first being groups `first`..`first_last`."""
    out = [piece for k in range(first) for piece in (pieces[k], separators[k])]
    out.append(_placeholder("payment_card"))
    if first_last < len(separators):
        out.append(separators[first_last])
    i = first_last + 1
    # Left to right: a reference number or a year next to the card ("ref 12 4111 1111 1111 1111") does not
    # hide it.
    while i < len(pieces):
        ends = ends_at[i]
        if ends is None:
            break  # fewer than 13 digits left
        # The cheap part of `_card_at` first: most groups cannot start a card.
        last = _card_at(pieces, separators, i, ends, uniform) if ends and pieces[i][0] in _CARD_FIRST_DIGITS else None
        if last is None:
            out.append(pieces[i])
            last = i
        else:
            out.append(_placeholder("payment_card"))
        if last < len(separators):
            out.append(separators[last])
        i = last + 1
    return "".join(out) + _rest(pieces, separators, i)


def _rest(pieces: list[str], separators: list[str], i: int) -> str:
    """The groups from `i` on, with the separators between them, as written."""
    if i >= len(pieces):
        return ""
    tail = [pieces[i]]
    for k in range(i + 1, len(pieces)):
        tail.append(separators[k - 1])
        tail.append(pieces[k])
    return "".join(tail)


def _password_value(match: re.Match[str]) -> tuple[str, str] | None:
    """(group name, secret) of a password match, or None when the value describes a password instead."""
    group = "quoted" if match.group("quoted") is not None else "bare"
    secret = match.group(group)
    if group == "bare":
        secret = secret.rstrip(_TRAILING_PUNCT)
    keyword = match.group("kw")
    if not secret or secret.startswith("[redacted") or secret.casefold() in _NOT_A_SECRET:
        return None
    if _AMBIGUOUS_PASSWORD_WORD.match(keyword) and not _SECRET_LIKE.search(secret):
        return None
    if _PIN_WORD.match(keyword) and not _PIN_CODE.match(secret):
        return None
    return group, secret


def _more_value(match: re.Match[str]) -> str:
    """One more value after a plural password keyword: redacted when it looks like a secret."""
    value = match.group(0)
    secret = value.rstrip(_TRAILING_PUNCT)
    if value.casefold() in _LIST_WORDS or secret.casefold() in _NOT_A_SECRET or not _SECRET_LIKE.search(secret):
        return value
    return _placeholder("password") + value[len(secret) :]


def _redact_passwords(text: str) -> tuple[str, bool]:
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        value = _password_value(match)
        if value is None:
            return match.group(0)
        group, secret = value
        found = True
        start = match.start(group) - match.start()
        whole = match.group(0)
        more = match.groupdict().get("more") or ""
        head = whole[: len(whole) - len(more)]
        head = head[:start] + _placeholder("password") + head[start + len(secret) :]
        if match.group("kw").casefold().endswith("s"):
            more = _MORE_VALUES.sub(_more_value, more)
        return head + more

    def login_pair(match: re.Match[str]) -> str:
        nonlocal found
        secret = match.group("bare").rstrip(_TRAILING_PUNCT)
        if not secret or secret.startswith("[redacted") or not _SECRET_LIKE.search(secret):
            return match.group(0)
        found = True
        start = match.start("bare") - match.start()
        whole = match.group(0)
        return whole[:start] + _placeholder("password") + whole[start + len(secret) :]

    # The three patterns share one trigger: its places are found again only after a pass changed the text.
    starts = _trigger_starts(text, _PASSWORD_TRIGGER)
    if starts is not None and not starts:
        return text, False
    for pattern, on_match in ((_PASSWORD, replace), (_SHORT_PASSWORD, replace), (_LOGIN_PAIR, login_pair)):
        changed = _sub_at_triggers(text, _PASSWORD_TRIGGER, pattern, on_match, starts)
        if changed is not text:
            text = changed
            starts = _trigger_starts(text, _PASSWORD_TRIGGER)
    return text, found


# Order matters: specific shapes before generic ones, so an IBAN's digits are not taken for a card number.
_PASSES: tuple[tuple[str, Callable[[str], tuple[str, bool]]], ...] = (
    ("api_key", _redact_api_keys),
    ("iban", _redact_ibans),
    ("national_id", _redact_national_ids),
    ("ssn", _redact_ssns),
    ("payment_card", _redact_cards),
    ("password", _redact_passwords),
)


# IBANs, national ids, SSNs and cards all hold a run of at least three digits ("12.345.678Z" has no four): text
# without one skips their four scans (~1.3 ms per 20,000 characters).
_NUMBER_GATE = re.compile(r"\d{3}")
_NEED_NUMBERS = frozenset({"iban", "national_id", "ssn", "payment_card"})


def redact_sensitive(text: str) -> Redaction:
    """Replace payment cards, IBANs, Spanish DNI/NIE, US SSNs, stated passwords and API keys in `text`.

    Each finding becomes ``[redacted <kind>]``; the rest of the text is kept as written:

    >>> redact_sensitive("Paga con la 4111 1111 1111 1111, gracias").text
    'Paga con la [redacted payment_card], gracias'
    """
    kinds: list[str] = []
    numbers = _NUMBER_GATE.search(text) is not None
    for kind, redact in _PASSES:
        if kind in _NEED_NUMBERS and not numbers:
            continue
        text, found = redact(text)
        if found:
            kinds.append(kind)
    return Redaction(text=text, kinds=tuple(kinds))


def contains_sensitive(text: str) -> bool:
    """True when `redact_sensitive` would change `text`."""
    return bool(redact_sensitive(text).kinds)
