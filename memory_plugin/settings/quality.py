"""Memory quality: near-duplicates, decay and the domain's vocabulary (`settings.quality`; README "Keeping memory
small, true and current")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, PlainSerializer, PlainValidator, field_validator

from ..quality.decay import DEFAULT_HALF_LIFE_DAYS
from ..quality.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from .flat import Flat, SettingsGroup

__all__ = ["QualityNames", "QualitySettings"]


def _a_vocabulary(value: object) -> Vocabulary:
    # Checked as an instance only: a vocabulary holds compiled patterns and rule objects, nothing pydantic
    # could build from text.
    if not isinstance(value, Vocabulary):
        raise ValueError(f"expected a memory_plugin.quality.vocabulary.Vocabulary, got {type(value).__name__}")
    return value


class QualitySettings(SettingsGroup):
    """Near-duplicates, decay and the domain's vocabulary (`settings.quality`)."""

    near_duplicate_threshold: float = Field(default=0.8, ge=0)
    """Trigram similarity (pg_trgm's, 0–1) at or above which a new fact reinforces a current fact of the same
    category instead of adding a row, when both have the same numbers/codes and negation. 0.8 merges rewordings
    that keep their words and keeps one-word substitutions apart; above 1 turns near-duplicate merging off."""

    dedup_embedding_threshold: float = Field(default=0.85, ge=0)
    """Cosine similarity (0–1) of two facts' embeddings (same model) at or above which a new fact reinforces a
    current fact of the same category instead of adding a row, when both have the same numbers/codes,
    negation and named values (`vocabulary`). Catches paraphrases trigrams miss ("Le
    gusta el aluminio 7075" / "Prefiere el aluminio 7075"). 0.85 was chosen on Spanish and English
    paraphrase pairs with the offline MiniLM (README); above 1 turns it off. Env
    `MEMORY_DEDUP_EMBEDDING_THRESHOLD`."""

    half_life_days: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_HALF_LIFE_DAYS))
    """Days for a fact's confidence to halve without being stated again, per category (0: never decays).
    Categories left out keep their default (`quality/decay.py`: preference 180, requirement 365, constraint
    120, feedback 90, rejection 0, goal 90, routine 120, contact 365, health_note 180, fact 365). From the
    environment as JSON: `MEMORY_HALF_LIFE_DAYS='{"preference": 90}'`."""

    decay_floor: float = Field(default=0.2, ge=0, le=1)
    """Facts whose decayed confidence is below this never reach the prompt; `memory-plugin maintain` archives
    them (correctness does not depend on it running)."""

    vocabulary: Annotated[Vocabulary, PlainValidator(_a_vocabulary), PlainSerializer(repr)] = Field(
        default_factory=lambda: DEFAULT_VOCABULARY, exclude=True, repr=False
    )
    """The domain's named values and slots (`quality/vocabulary.py`): which words name one value ("lunes",
    "monday": near-duplicates must name the same) and which subjects hold one current value (budget, lead
    time). The default is domain-free; pass a domain's own, e.g. `MemorySettings(vocabulary=SHOP_VOCABULARY)`
    (`agents/vocabulary.py`). Code only, not read from the environment."""

    vocabulary_module: str | None = None
    """`package.module:NAME` of the `Vocabulary` the command line's processes (`worker`, `serve`, `inspect`…)
    use instead of the generic one, e.g. `agents.vocabulary:SHOP_VOCABULARY`; code passes `vocabulary` instead."""

    @field_validator("half_life_days")
    @classmethod
    def _known_categories(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(DEFAULT_HALF_LIFE_DAYS))
        if unknown:
            raise ValueError(f"unknown fact categories {unknown}; known: {sorted(DEFAULT_HALF_LIFE_DAYS)}")
        if any(days < 0 for days in value.values()):
            raise ValueError("half-lives must be >= 0 days (0: no decay)")
        return {**DEFAULT_HALF_LIFE_DAYS, **value}


class QualityNames:
    """The flat names (and `MEMORY_*` variables) of `QualitySettings`' fields."""

    near_duplicate_threshold = Flat[float]("quality.near_duplicate_threshold")
    dedup_embedding_threshold = Flat[float]("quality.dedup_embedding_threshold")
    half_life_days = Flat[dict[str, float]]("quality.half_life_days")
    decay_floor = Flat[float]("quality.decay_floor")
    vocabulary = Flat[Vocabulary]("quality.vocabulary", env=False)  # code only
    vocabulary_module = Flat[str | None]("quality.vocabulary_module")
