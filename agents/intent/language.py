"""Which language a message is in (Spanish or English), for the canonical names of entities."""

from __future__ import annotations

import re

__all__ = ["is_english"]

# Small stop-word lists: enough to tell a Spanish message from an English one for canonical names.
_EN_WORDS = frozenset(
    re.findall(
        r"\S+",
        "the and i we need for with please my our to of is are by in parts units quote hello hi prefer "
        "always remember can you what how much would like want order never suggest offer budget steel "
        "stainless don't do not per parts same last time as before it go ahead confirm thanks",
    )
)
_ES_WORDS = frozenset(
    re.findall(
        r"\S+",
        "el la los las de para con necesito necesitamos por que y en mi hola piezas presupuesto un una "
        "quiero prefiero siempre gracias pedido es como otras del al",
    )
)


def is_english(folded: str) -> bool:
    """Whether a folded message (`folding.fold`) has more English than Spanish marker words."""
    words = re.findall(r"[a-z']+", folded)
    en = sum(w in _EN_WORDS for w in words)
    es = sum(w in _ES_WORDS for w in words)
    return en > es
