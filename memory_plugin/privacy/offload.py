"""Running the filter on large input without blocking the event loop.

The filter is linear, but a long message still costs real CPU: the whole note filter takes 0.05-0.3 ms of CPU
per 1,000 characters of everyday or adversarial text, health words included, on the shared
2-core machine (`bench/privacy_filter.py`). Below `OFFLOAD_THRESHOLD_CHARS` (at most ~2 ms of work) calling it
inline is cheaper than a thread hop; above it the work goes to a worker thread so other users' requests keep
being served.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from ..models import FactCategory
from .policy import HealthNotesConsent, NoteRedaction, SanitizedText, redact_note_text, sanitize_fact_text

__all__ = ["OFFLOAD_THRESHOLD_CHARS", "redact_note_text_async", "run_filter", "sanitize_fact_text_async"]

OFFLOAD_THRESHOLD_CHARS = 4_000
"""Texts longer than this are filtered in a worker thread (`asyncio.to_thread`)."""

_R = TypeVar("_R")


async def run_filter(func: Callable[[str], _R], text: str, *, threshold: int = OFFLOAD_THRESHOLD_CHARS) -> _R:
    """`func(text)`, in a worker thread when `text` is longer than `threshold` characters."""
    if len(text) <= threshold:
        return func(text)
    return await asyncio.to_thread(func, text)


async def redact_note_text_async(text: str, *, consent: HealthNotesConsent = "off") -> NoteRedaction:
    """`redact_note_text` off the event loop for long notes."""
    return await run_filter(lambda t: redact_note_text(t, consent=consent), text)


async def sanitize_fact_text_async(content: str, category: FactCategory) -> SanitizedText:
    """`sanitize_fact_text` off the event loop for long facts."""
    return await run_filter(lambda t: sanitize_fact_text(t, category), content)
