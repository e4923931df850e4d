"""Validation errors in plain words: which field, and what it must be.

pydantic's own text names its internals ("Unable to extract tag using discriminator 'kind'", "Input should be
'user' or 'assistant'"); a client needs `turns[0].role must be 'user' or 'assistant', not 'system'`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["field_path", "plain_error"]

_WHERE = {"query": "query parameter ", "path": "path parameter ", "header": "header "}


def field_path(loc: Sequence[int | str]) -> str:
    """`("body", "turns", 0, "content")` → `turns[0].content`; `("query", "limit")` → `query parameter limit`."""
    parts = list(loc)
    prefix = ""
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        prefix = _WHERE.get(str(parts.pop(0)), "")
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("SimpleTurn", "dict[str,any]", "function-after[...]"):
            continue  # pydantic's name of a union member: not a field the client sent
        else:
            text += f".{part}" if text else str(part)
    return prefix + (text or "the body")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _what(error: Mapping[str, Any]) -> str:
    """What the field must be, from pydantic's error type and context."""
    kind = str(error.get("type", ""))
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    given = error.get("input")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field of this request: remove it"
    if kind == "string_too_short":
        least = ctx.get("min_length")
        return "must not be empty" if least == 1 else f"needs at least {least} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, not {_shown(given)}"
    if kind in ("string_type", "int_type", "int_parsing", "uuid_parsing", "uuid_type", "list_type", "dict_type"):
        wanted = {"string": "a string", "int": "an integer", "uuid": "a UUID", "list": "a list", "dict": "an object"}
        return f"must be {wanted[kind.split('_')[0]]}, not {_shown(given)}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        sign = {"greater_than_equal": "≥", "less_than_equal": "≤", "greater_than": ">", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "?")
        return f"must be {sign} {bound}, not {_shown(given)}"
    if kind == "json_invalid":
        return f"is not valid JSON ({ctx.get('error', 'syntax error')})"
    return f"is invalid: {str(error.get('msg', 'invalid value')).rstrip('.')}"


def plain_error(error: Mapping[str, Any], prefix: Sequence[int | str] = ()) -> str:
    """One pydantic/FastAPI error as `<field> <what it must be>`; `prefix` locates a nested validation."""
    loc = [*prefix, *error.get("loc", ())]
    if str(error.get("type")) == "json_invalid":
        return f"the request body {_what(error)}"
    return f"{field_path(loc)} {_what(error)}"
