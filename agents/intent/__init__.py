"""Intent and entity classification for the shop's budget requests (step 3 of the budget workflow).

Two ways to classify one user message, with the same output (`Classification`, `schema.py`):

- `build_intent_classifier(model)` (`llm.py`): a pydantic-ai agent with structured output, for a real LLM;
- `classify_offline(text)` (`rules.py`): deterministic Spanish and English keyword rules over the entities
  that the offline entity rules find (`entities.py`, `language.py`). `offline_classifier_model()` wraps it in a
  `FunctionModel`, so the workflow always runs the same agent, offline too.
"""

from __future__ import annotations

from .entities import extract_entities
from .llm import CLASSIFIER_INSTRUCTIONS, build_intent_classifier, offline_classifier_model
from .rules import classify_offline, is_rejection
from .schema import ENTITY_KINDS, Classification, EntityKind, Intent

__all__ = [
    "CLASSIFIER_INSTRUCTIONS",
    "ENTITY_KINDS",
    "Classification",
    "EntityKind",
    "Intent",
    "build_intent_classifier",
    "classify_offline",
    "extract_entities",
    "is_rejection",
    "offline_classifier_model",
]
