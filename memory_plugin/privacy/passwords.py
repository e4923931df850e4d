"""Passwords a person states: a word naming one, a copula or colon, the value; login pairs; PIN codes."""

from __future__ import annotations

import re

from .scan import _placeholder, _sub_at_triggers, _trigger, _trigger_starts

# --- passwords ----------------------------------------------------------------------------------------------------
# "mi contraseña es X", "password: X", "password is: X", "las contraseñas son X", "la clave del portal es X",
# "my password for the ERP is X": a word naming a password, an optional "of/for <something>", a copula and/or a
# colon, then the secret (quoted or one token).
_PASSWORD = re.compile(
    r"\b(?P<kw>(?:contraseña|contrasena|password|clave)(?P<pl>s)?(?:\s+de\s+acceso)?|passwd|passcode|pin)\b"
    r"(?:\s++(?:del?|de\s+la|para|for|of|to|on)\s++(?:(?:el|la|los|las|mi|the|my|our)\s+)?[\w.-]++"
    r"(?:\s++[\w.-]++){0,3}?)?"
    r"(?:\s++(?:es|era|sería|será|son|eran|is|was|are|were|would\s+be)\b\s*+[:=]?|\s*+[:=])\s*+"
    r"(?:[\"'“«](?P<quoted>[^\"'”»\n]{1,100})[\"'”»]|(?P<bare>[^\s\"'“”«»]++))"
    # Plural keywords list several on the same line: "las contraseñas son Abc123 y Xyz789" (up to five more
    # values); after a singular one the next words are never consumed, so a keyword among them is still read.
    r"(?P<more>(?(pl)(?:(?:[ \t]*+,[ \t]*+|[ \t]++(?:(?:y|e|and|or|o)[ \t]++)?)[^\s\"'“”«»,]++){0,5}+|))",
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
# A password keyword that names a product rather than a password: "mi gestor de contraseñas es estupendo",
# "the password manager is great" (the English order never matches: "manager" stands before the copula).
_PRODUCT_BEFORE = re.compile(
    r"(?:gestor(?:es)?|administrador(?:es)?|generador(?:es)?|app|aplicaci[oó]n|programa|cambio|pol[ií]tica)"
    r"\s+de\s+(?:las?\s+|los\s+)?$",
    re.IGNORECASE,
)


_PASSWORD_TRIGGER = _trigger(
    ("contrase", "contrasen", "pass", "pin", "clave", "pw", "pswd", "login", "log", "usuario", "user", "credencial")
)


# Passwords inside connection strings and command lines, each with literals one of which it must contain (a
# literal search is ~0.02 ms on 20,000 characters): URL user info ("postgres://admin:S3cret@db"), environment
# assignments ("DB_PASSWORD=x", "API_TOKEN='x'"), `sshpass -p`, `mysql -pX`, `--password=X`.
_INLINE_CREDENTIALS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (
        ("://",),
        re.compile(r"(?<![\w+.-])[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@\[\]]{1,64}:(?P<secret>[^\s/@]{1,128})@"),
    ),
    (
        ("PASSWORD", "PASSWD", "_PWD", "SECRET", "TOKEN"),
        re.compile(r"\b[A-Z0-9_]*(?:PASSWORD|PASSWD|_PWD|SECRET|TOKEN)[A-Z0-9_]*\s*=\s*[\"']?(?P<secret>[^\s\"'$]+)"),
    ),
    (("sshpass",), re.compile(r"\bsshpass\s+-p\s*[\"']?(?P<secret>[^\s\"']+)")),
    (("mysql",), re.compile(r"\bmysql(?:dump|admin)?\b[^\n]{0,120}?\s-p(?P<secret>[^\s\"'][^\s\"']*)")),
    (("--password",), re.compile(r"--password[=\s]\s*[\"']?(?P<secret>[^\s\"']+)")),
)


def _redact_inline_credentials(text: str) -> tuple[str, bool]:
    """Passwords in connection strings and command lines (`_INLINE_CREDENTIALS`) replaced, the rest kept."""
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        secret = match.group("secret")
        if secret.startswith("[redacted"):
            return match.group(0)
        found = True
        start = match.start("secret") - match.start()
        whole = match.group(0)
        return whole[:start] + _placeholder("password") + whole[start + len(secret) :]

    for literals, pattern in _INLINE_CREDENTIALS:
        if any(literal in text for literal in literals):
            text = pattern.sub(replace, text)
    return text, found


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
    text, found = _redact_inline_credentials(text)

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        value = _password_value(match)
        if value is None or _PRODUCT_BEFORE.search(text, max(0, match.start() - 24), match.start()):
            return match.group(0)
        group, secret = value
        found = True
        start = match.start(group) - match.start()
        whole = match.group(0)
        more = match.groupdict().get("more") or ""
        head = whole[: len(whole) - len(more)]
        head = head[:start] + _placeholder("password") + head[start + len(secret) :]
        if match.groupdict().get("pl"):
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
        return text, found
    for pattern, on_match in ((_PASSWORD, replace), (_SHORT_PASSWORD, replace), (_LOGIN_PAIR, login_pair)):
        changed = _sub_at_triggers(text, _PASSWORD_TRIGGER, pattern, on_match, starts)
        if changed is not text:
            text = changed
            starts = _trigger_starts(text, _PASSWORD_TRIGGER)
    return text, found
