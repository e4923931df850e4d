"""Fact extractors: turn conversation excerpts into candidate long-term facts.

`LLMExtractor` asks a language model (pydantic-ai structured output); `RuleBasedExtractor` recognises explicit
Spanish and English statements offline. `default_extractor` picks one from `MemorySettings.extraction_model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import ExtractionOutcome, FactExtractor
from .rules import RuleBasedExtractor

if TYPE_CHECKING:
    from .llm import LLMExtractor

__all__ = ["ExtractionOutcome", "FactExtractor", "LLMExtractor", "RuleBasedExtractor", "default_extractor"]


def default_extractor(model: str | None) -> FactExtractor:
    """`LLMExtractor(model)` when a model name is given (e.g. "openai:gpt-4o-mini"), else the offline
    `RuleBasedExtractor`. The model is only resolved on first extraction, so a missing API key surfaces as an
    `ExtractionError` then, not here."""
    if model:
        from .llm import LLMExtractor

        return LLMExtractor(model)
    return RuleBasedExtractor()


def __getattr__(name: str) -> Any:
    # `LLMExtractor` on first access: its module imports pydantic-ai (~1.1 s), which the offline extractor
    # and a process that only opens the memory never need.
    if name == "LLMExtractor":
        from .llm import LLMExtractor

        return LLMExtractor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
