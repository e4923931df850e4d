"""Text normalisation shared by de-duplication (hashes) and entity merging.

"Aluminio 7075", "aluminio  7075" and "ALUMINIO 7075" are one entity; "Tolerancia ±0.05 mm" and
"tolerancia ±0,05 mm" are not merged here (numbers are kept as written).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

__all__ = ["content_hash", "normalize_key", "one_line", "strip_marks", "unstorable_reason"]

_SPACES = re.compile(r"\s+")
# Runs of characters from U+0300 on: no character below it is a combining mark (unicodedata.combining is 0).
_FROM_MARKS = re.compile("[^\x00-\u02ff]+")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_TRAILING_PUNCT = " .,;:!¡?¿"


@lru_cache(maxsize=65_536)
def normalize_key(text: str) -> str:
    """Case-, accent- and whitespace-insensitive form of `text`, used as an equality key.

    Cached: the same entity values come back turn after turn, and this sits on the `add_message` path.
    """
    without_accents = strip_marks(unicodedata.normalize("NFKD", text))
    return _SPACES.sub(" ", without_accents.casefold()).strip().strip(_TRAILING_PUNCT)


def strip_marks(decomposed: str) -> str:
    """`decomposed` (NFKD) without its combining marks (the accents "é" decomposes into): only the characters
    from U+0300 on are looked at, so an ASCII text costs one check and a Spanish sentence a few (a loop over
    every character was about a tenth of a one-fact write's client CPU in cProfile)."""
    if decomposed.isascii():
        return decomposed
    return _FROM_MARKS.sub(_keep_non_marks, decomposed)


def _keep_non_marks(run: re.Match[str]) -> str:
    return "".join(c for c in run.group() if not unicodedata.combining(c))


def content_hash(*parts: str) -> str:
    """SHA-256 (hex) of the normalised parts, joined with `|`: the `user_memory.content_hash` column."""
    joined = "|".join(normalize_key(p) for p in parts)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def one_line(text: str, limit: int) -> str:
    """Collapse whitespace and control characters to single spaces and cut to `limit` characters."""
    flat = _SPACES.sub(" ", "".join(c if c.isprintable() else " " for c in text)).strip()
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def unstorable_reason(text: str) -> str | None:
    """Why Postgres could not store `text` (a NUL character, or a lone surrogate, which has no UTF-8 form,
    as `json.loads` returns for an unpaired escape), or None when it can. One regex scan."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain NUL (\\x00) characters"
    return f"must not contain unpaired surrogates (U+{ord(found.group()):04X} at position {found.start()})"
