"""Secrets inside JSON values: metadata, speakers and anything else stored next to a memory's text.

`redact_json` walks a JSON value (dicts, lists, strings, numbers) and runs `redact_sensitive` on every string,
key included, and on every integer long enough to be a card or an account number (a card stored as
``4111111111111111`` without quotes is still a card). The shape of the value is kept; only the findings change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .redaction import redact_sensitive

__all__ = ["JsonRedaction", "redact_json", "redact_json_value"]

# The shortest number any redaction rule can match: a 7-digit NIE body (with its letters it is a string anyway);
# shorter integers (quantities, years, ids) are never looked at.
_MIN_NUMBER_DIGITS = 7
# Nesting deeper than this is not JSON a person wrote; deeper levels are redacted as their text form.
_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class JsonRedaction:
    """The outcome of `redact_json_value`."""

    value: Any
    """The input with every finding replaced by ``[redacted <kind>]``."""
    kinds: tuple[str, ...]
    """Kinds found anywhere in the value, each once."""


def redact_json_value(value: Any) -> JsonRedaction:
    """Redact every string (and every long integer) inside a JSON value; report what was found."""
    kinds: list[str] = []

    def text(s: str) -> str:
        redaction = redact_sensitive(s)
        kinds.extend(k for k in redaction.kinds if k not in kinds)
        return redaction.text

    def walk(node: Any, depth: int) -> Any:
        if isinstance(node, str):
            return text(node)
        if isinstance(node, bool) or node is None or isinstance(node, float):
            return node
        if isinstance(node, int):
            if len(str(abs(node))) < _MIN_NUMBER_DIGITS:
                return node
            redacted = text(str(node))
            return node if redacted == str(node) else redacted
        if depth >= _MAX_DEPTH:
            return text(str(node))
        if isinstance(node, Mapping):
            return {text(str(key)): walk(item, depth + 1) for key, item in node.items()}
        if isinstance(node, Sequence):
            return [walk(item, depth + 1) for item in node]
        return text(str(node))  # not JSON: stored as its text, so filtered as text

    return JsonRedaction(walk(value, 0), tuple(kinds))


def redact_json(value: Any) -> Any:
    """`value` with every string and long integer inside it passed through `redact_sensitive`.

    >>> redact_json({"card": "4111 1111 1111 1111", "qty": 3})
    {'card': '[redacted payment_card]', 'qty': 3}
    """
    return redact_json_value(value).value
