"""Stored text made safe for the memory block: one line per item, no control characters, no angle brackets.

Memory holds what users said, so it is data, never instructions: `<` and `>` become `‹` and `›`, so stored
text can neither open nor close a tag of the fenced block, and an item cannot break into several lines.
"""

from __future__ import annotations

__all__ = ["one_line", "safe_lines"]

_ANGLE = str.maketrans({"<": "‹", ">": "›"})


def one_line(text: str, limit: int = 300) -> str:
    """`text` on one line (whitespace and control characters collapsed), escaped, cut to `limit` with `…`."""
    # Most stored text is printable already: the per-character pass (~1 ms a turn on the shop bench) only when not.
    printable = text if text.isprintable() else "".join(c if c.isprintable() else " " for c in text)
    flat = " ".join(printable.split()).translate(_ANGLE)
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def safe_lines(text: str, limit: int = 1000) -> str:
    """Multi-line text (a summary) with each line made safe by `one_line`; empty lines dropped."""
    return "\n".join(line for line in (one_line(raw, limit) for raw in text.splitlines()) if line)
