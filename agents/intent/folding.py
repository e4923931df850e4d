"""Text folding for the offline rules: lower case without accents, one output character per input character.

Matching runs on a folded copy of the text, so patterns need no accent variants and match spans map back onto
the original text.
"""

from __future__ import annotations

import unicodedata

__all__ = ["fold"]


def fold(text: str) -> str:
    """`text` lower-cased and without accents, of the same length (unlike `str.lower` on "İ"), so spans map
    onto `text`."""
    return "".join(unicodedata.normalize("NFD", c.lower())[0] if c.lower() else c for c in text)
