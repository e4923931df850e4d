"""Turning a `MemoryUpdate`'s parts (facts, preferences, a project, patterns) into rows to write.

Each fact item carries the keys the write rules compare, computed once here so SQL and Python agree: its
slot (`quality/slots.py`), and its near-duplicate key, guard and words (`quality/matching.py`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..models import MemorizedFact, ProjectRecord, UserPreferences
from ..quality.matching import match_guard, match_key, match_words
from ..quality.slots import detect_slot
from ..quality.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..rows import SINGLE_PREFERENCE_SLOTS, MemoryItem, is_single_valued, merge_items
from ..text import content_hash

__all__ = ["fact_item", "items_from_update"]


def fact_item(fact: MemorizedFact, session_id: str | None, vocabulary: Vocabulary = DEFAULT_VOCABULARY) -> MemoryItem:
    """One fact as the row to write, with its slot and near-duplicate keys (named values and slots from
    `vocabulary`)."""
    return MemoryItem(
        kind="fact",
        category=fact.category,
        content=fact.content,
        content_hash=content_hash("fact", fact.category, fact.content),
        confidence=fact.confidence,
        source=fact.source,
        importance=fact.importance,
        source_message_ids=fact.source_message_ids,
        session_id=session_id,
        occurred_at=fact.timestamp,
        expires_at=fact.expires_at,
        slot=detect_slot(fact.content, fact.category, vocabulary),
        match_key=match_key(fact.content),
        match_guard=match_guard(fact.content, vocabulary),
        match_words=match_words(fact.content),
        replaces=fact.replaces,
        sensitive=fact.sensitive,
    )


def _preference_items(prefs: UserPreferences, session_id: str | None) -> list[MemoryItem]:
    items = [
        MemoryItem(
            kind="preference",
            category="preferred_materials",
            content=material,
            content_hash=content_hash("preference", "preferred_materials", material),
            confidence=0.9,
            source="explicit",
            session_id=session_id,
        )
        for material in prefs.preferred_materials
    ]
    for slot in SINGLE_PREFERENCE_SLOTS:
        value = getattr(prefs, slot)
        if value is not None:
            # Hashed by slot only: a new value replaces the old one instead of adding a second row.
            items.append(
                MemoryItem(
                    kind="preference",
                    category=slot,
                    content=str(value),
                    content_hash=content_hash("preference", slot),
                    confidence=0.9,
                    source="explicit",
                    session_id=session_id,
                )
            )
    return items


def _project_item(project: ProjectRecord, session_id: str | None) -> MemoryItem:
    return MemoryItem(
        kind="project",
        category="project",
        content=project.description,
        # Projects are history: each one is its own row, never merged.
        content_hash=content_hash("project", str(project.id)),
        confidence=1.0,
        source="explicit",
        session_id=project.session_id or session_id,
        attributes={"materials": list(project.materials), "quantity": project.quantity, "status": project.status},
        occurred_at=project.timestamp,
    )


def _pattern_item(pattern: str, session_id: str | None) -> MemoryItem:
    return MemoryItem(
        kind="pattern",
        category="pattern",
        content=pattern,
        content_hash=content_hash("pattern", pattern),
        confidence=0.8,
        source="inferred",
        session_id=session_id,
    )


def items_from_update(
    facts: Iterable[MemorizedFact],
    preferences: UserPreferences | None,
    project: ProjectRecord | None,
    patterns: Iterable[str],
    session_id: str | None,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> list[MemoryItem]:
    """Turn the parts of a `MemoryUpdate` into rows to write, merging repeats within the batch; facts get
    their keys from `vocabulary` (`MemorySettings.vocabulary`).

    Postgres refuses an `INSERT ... ON CONFLICT DO UPDATE` that touches the same row twice, so items with
    the same hash are folded here first (the stronger confidence and importance win).
    """
    items = [fact_item(f, session_id, vocabulary) for f in facts]
    if preferences is not None:
        items.extend(_preference_items(preferences, session_id))
    if project is not None:
        items.append(_project_item(project, session_id))
    items.extend(_pattern_item(p, session_id) for p in patterns)
    merged: dict[str, MemoryItem] = {}
    for item in items:
        previous = merged.get(item.content_hash)
        if previous is None or is_single_valued(item):
            merged[item.content_hash] = item  # new, or a later value of a single-valued slot wins
        else:
            merged[item.content_hash] = merge_items(previous, item)
    return list(merged.values())
