"""Fact extractors: turn conversation excerpts into candidate long-term facts.

`LLMExtractor` asks a language model (pydantic-ai structured output); `RuleBasedExtractor` recognises explicit
Spanish and English statements offline. `default_extractor` picks one from `MemorySettings.extraction_model`.
"""

from __future__ import annotations

from .base import ExtractionOutcome, FactExtractor
from .llm import LLMExtractor
from .rules import RuleBasedExtractor

__all__ = ["ExtractionOutcome", "FactExtractor", "LLMExtractor", "RuleBasedExtractor", "default_extractor"]


def default_extractor(model: str | None) -> FactExtractor:
    """`LLMExtractor(model)` when a model name is given (e.g. "openai:gpt-4o-mini"), else the offline
    `RuleBasedExtractor`. The model is only resolved on first extraction, so a missing API key surfaces as an
    `ExtractionError` then, not here."""
    if model:
        return LLMExtractor(model)
    return RuleBasedExtractor()
