"""`FactAdmission`: what happens to one fact before it may be written — checks, the confidence threshold, the
sensitive-data filter, relative dates made absolute, and the expiry of temporary facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from ..dates import resolve_relative_dates
from ..errors import InvalidMemoryInputError
from ..logs import LOG_PREFIX, logger
from ..models import MemorizedFact, MemoryUpdate, ProjectRecord, UserPreferences
from ..privacy import sanitize_fact_text, sanitize_item_text
from ..settings import MemorySettings
from ..validation import check_text

__all__ = ["TEMPORARY_FACT_IMPORTANCE", "AdmissionStats", "FactAdmission"]

TEMPORARY_FACT_IMPORTANCE = 4
"""Lowest importance of a fact stored with an expiry: while it holds, a temporary fact ("away next week") is
what matters most, and with its category's low default it would never make the prompt's top facts."""


@dataclass(slots=True)
class AdmissionStats:
    """What admission did to the facts and items it saw."""

    facts_rejected: int = 0
    facts_redacted: int = 0
    facts_dropped_sensitive: int = 0
    facts_health_reduced: int = 0
    facts_dropped_health: int = 0
    items_redacted: int = 0
    dates_resolved: int = 0
    facts_expiring: int = 0


class FactAdmission:
    """Validates and cleans facts and the other parts of an update for storage (`MemoryStats` documents the
    counters)."""

    def __init__(self, settings: MemorySettings) -> None:
        self.settings = settings
        self.stats = AdmissionStats()
        self._date_zone = ZoneInfo(settings.date_timezone) if settings.date_timezone else None

    def admit(self, fact: MemorizedFact, user_id: UUID) -> MemorizedFact | None:
        """`admit_or_refuse`, None when the fact must not be stored."""
        admitted = self.admit_or_refuse(fact, user_id)
        return admitted if isinstance(admitted, MemorizedFact) else None

    def admit_or_refuse(self, fact: MemorizedFact, user_id: UUID) -> MemorizedFact | str:
        """Validate and clean one fact for storage; the reason it must not be stored instead (below
        threshold, or nothing storable left once sensitive data is removed). Raises on invalid input.

        Relative dates are resolved against `fact.timestamp` (the message's time for extracted facts), and a
        fact pinned only to dates still to come gets an expiry (see `memory_plugin.dates`)."""
        if not isinstance(fact, MemorizedFact):
            raise InvalidMemoryInputError(f"new_facts must hold MemorizedFact objects, got {type(fact).__name__}")
        check_text(fact.content, "fact content", self.settings.max_fact_chars)
        if fact.user_id is not None and fact.user_id != user_id:
            raise InvalidMemoryInputError(f"fact {fact.id} belongs to user {fact.user_id}, not {user_id}")
        if fact.confidence < self.settings.min_fact_confidence:
            self.stats.facts_rejected += 1
            logger.debug("%s not storing low-confidence fact %s (%.2f)", LOG_PREFIX, fact.id, fact.confidence)
            return f"confidence {fact.confidence:.2f} is below the threshold {self.settings.min_fact_confidence:.2f}"
        clean = self.sanitize_fact(fact)
        if clean is None:
            return "nothing storable is left once sensitive data and clinical detail are removed"
        said_at = clean.timestamp
        if self._date_zone is not None and said_at.tzinfo is not None:
            said_at = said_at.astimezone(self._date_zone)  # the users' calendar decides what "mañana" is
        dates = resolve_relative_dates(clean.content, said_at)
        changes: dict[str, Any] = {"user_id": user_id}
        if dates.changed:
            self.stats.dates_resolved += 1
            changes["content"] = dates.text
        expires_at = clean.expires_at or dates.expires_at(said_at)
        if expires_at is not None:
            self.stats.facts_expiring += 1
            changes["expires_at"] = expires_at
            changes["importance"] = max(clean.importance, TEMPORARY_FACT_IMPORTANCE)
        return clean.model_copy(update=changes)

    def sanitize_fact(self, fact: MemorizedFact) -> MemorizedFact | None:
        """The fact with sensitive data redacted and clinical details reduced to a `health_note`, or None when
        nothing storable is left. Counted and logged without the sensitive text; nothing is written."""
        result = sanitize_fact_text(fact.content, fact.category)
        if result.text is None:
            if result.dropped == "clinical":
                self.stats.facts_dropped_health += 1
                logger.info("%s dropped a fact made of clinical details (%s)", LOG_PREFIX, ", ".join(result.clinical))
            else:
                self.stats.facts_dropped_sensitive += 1
                logger.info(
                    "%s dropped a fact made only of sensitive data (%s)", LOG_PREFIX, ", ".join(result.redacted)
                )
            return None
        if result.redacted:
            self.stats.facts_redacted += 1
            logger.info("%s redacted %s from a fact before storing it", LOG_PREFIX, ", ".join(result.redacted))
        if result.health_reduced:
            self.stats.facts_health_reduced += 1
            logger.info("%s reduced clinical details (%s) to a health note", LOG_PREFIX, ", ".join(result.clinical))
        if result.text == fact.content and result.category == fact.category:
            return fact
        return fact.model_copy(update={"content": result.text, "category": result.category})

    def sanitize_parts(self, update: MemoryUpdate) -> tuple[UserPreferences | None, ProjectRecord | None, list[str]]:
        """The update's preferences, project and patterns with sensitive data redacted."""
        found = False

        def clean(text: str) -> str:
            nonlocal found
            cleaned, kinds = sanitize_item_text(text)
            found = found or bool(kinds)
            return cleaned

        prefs = update.preferences
        if prefs is not None:
            prefs = prefs.model_copy(
                update={
                    "preferred_materials": [clean(m) for m in prefs.preferred_materials],
                    **{
                        slot: clean(value)
                        for slot in ("typical_quantities", "industry", "location")
                        if (value := getattr(prefs, slot)) is not None
                    },
                }
            )
        project = update.project
        if project is not None:
            project = project.model_copy(
                update={
                    "description": clean(project.description),
                    "materials": tuple(clean(m) for m in project.materials),
                    "quantity": clean(project.quantity) if project.quantity is not None else None,
                    "status": clean(project.status),
                }
            )
        patterns = [clean(p) for p in update.patterns]
        if found:
            self.stats.items_redacted += 1
            logger.info("%s redacted sensitive data from preferences, a project or patterns", LOG_PREFIX)
        return prefs, project, patterns
