"""Structured slots: the user's standing knowledge in a few short fields, patched field by field.

The slots hold what must reach every turn whatever the user asks now: who the user is (sector, place), goal,
constraints, preferences, schedule, rejections, targets, progress markers, the reminder preference and the profile
(`UserPreferences`). Each entry keeps its provenance (the fact and the messages it came from).

The profile is a view: `ContextBuilder` fills it at read time from the stored preference rows with the same
function that gives `LongTermMemory.preferences` (`with_profile`), so the two cannot disagree; the other
fields are stored and patched from facts.

Only confirmed facts patch the slots (`source == "explicit"`: the user said it), and a patch names the
fields it changes with the value it expects them to hold now: the store applies it only if those fields
are unchanged (compare-and-set per field), so two writers patching different fields both land, and a
writer that raced on the same field re-reads and retries instead of overwriting the other's entry. The
document is never rewritten whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, get_args
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..models import MemorizedFact, UserPreferences, utc_now
from .lines import one_line
from .tokens import TokenCounter

__all__ = [
    "SLOT_FIELDS",
    "SlotEntry",
    "SlotField",
    "SlotPatch",
    "Slots",
    "merge_preferences",
    "patch_from_facts",
    "preferences_from_slots",
    "render_slots",
    "slots_from_facts",
    "with_profile",
]

SlotField = Literal[
    "profile",
    "about",
    "goal",
    "constraints",
    "rejections",
    "preferences",
    "schedule",
    "targets",
    "reminder_pref",
    "progress_markers",
]
"""The slots, in the order they are printed (and kept when the slot budget is short)."""
SLOT_FIELDS: tuple[SlotField, ...] = get_args(SlotField)

# Which fact categories fill which slot; the other categories (feedback, contact, fact) are reached by the
# query-aware facts instead. `targets`, `progress_markers` and `reminder_pref` are set by explicit patches.
_CATEGORY_SLOT: dict[str, SlotField] = {
    "goal": "goal",
    "constraint": "constraints",
    "requirement": "constraints",
    "health_note": "constraints",
    "rejection": "rejections",
    "preference": "preferences",
    "routine": "schedule",
    # Who the user is (sector, place, machines, size): standing, whatever the question.
    "fact": "about",
}
_LABELS: dict[SlotField, str] = {
    "profile": "profile",
    "about": "about the user",
    "goal": "goal",
    "constraints": "constraints",
    "rejections": "never suggest",
    "preferences": "preferences",
    "schedule": "schedule",
    "targets": "targets",
    "reminder_pref": "reminders",
    "progress_markers": "progress",
}
MAX_ENTRIES_PER_FIELD = 8
"""Newest entries kept per field: eight one-line entries is ~120 tokens, half the slot budget."""


class SlotEntry(BaseModel):
    """One value of a slot with its provenance."""

    model_config = ConfigDict(frozen=True)

    text: str
    """The value, one short line."""
    fact_id: UUID | None = None
    """The long-term fact it came from (None for values set directly)."""
    message_ids: tuple[str, ...] = ()
    """The messages the value was taken from."""
    at: datetime = Field(default_factory=utc_now)
    """When it was set."""


_ENTRIES = TypeAdapter(list[SlotEntry])


class Slots(BaseModel):
    """The slot document: field -> entries, newest first. Empty fields are absent."""

    fields: dict[SlotField, list[SlotEntry]] = Field(default_factory=dict)
    """The filled fields."""

    def get(self, name: SlotField) -> list[SlotEntry]:
        """The entries of `name`, newest first ([] when empty)."""
        return list(self.fields.get(name, []))

    def is_empty(self) -> bool:
        """True when no field holds anything."""
        return not any(self.fields.values())

    def to_json(self) -> dict[str, Any]:
        """The document as stored (jsonb): field -> list of entries."""
        return {name: _ENTRIES.dump_python(entries, mode="json") for name, entries in self.fields.items() if entries}

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> Slots:
        """The stored document back (unknown fields and null values are ignored)."""
        fields: dict[SlotField, list[SlotEntry]] = {}
        for name, value in (document or {}).items():
            if name in SLOT_FIELDS and value:
                fields[name] = _ENTRIES.validate_python(value)
        return cls(fields=fields)


class SlotPatch(BaseModel):
    """A field-level change: for each field, the entries it must hold now (`expected`) and after (`new`)."""

    expected: dict[SlotField, list[SlotEntry]] = Field(default_factory=dict)
    """What each changed field held when the patch was computed ([] for empty)."""
    new: dict[SlotField, list[SlotEntry]] = Field(default_factory=dict)
    """Each changed field's new entries ([] clears it)."""

    def is_empty(self) -> bool:
        """True when the patch changes nothing."""
        return not self.new

    def expected_json(self) -> dict[str, Any]:
        """`expected` as the store compares it (jsonb; an empty field is null)."""
        return {k: (_ENTRIES.dump_python(v, mode="json") if v else None) for k, v in self.expected.items()}

    def new_json(self) -> dict[str, Any]:
        """`new` as the store writes it (jsonb; a cleared field is null)."""
        return {k: (_ENTRIES.dump_python(v, mode="json") if v else None) for k, v in self.new.items()}

    def apply(self, slots: Slots) -> Slots:
        """`slots` with this patch applied (no check of `expected`)."""
        fields = dict(slots.fields)
        for name, entries in self.new.items():
            if entries:
                fields[name] = list(entries)
            else:
                fields.pop(name, None)
        return Slots(fields=fields)

    def conflicts_with(self, slots: Slots) -> bool:
        """True when a field this patch changes no longer holds what it expected."""
        return any(_texts(slots.get(name)) != _texts(entries) for name, entries in self.expected.items())


def _texts(entries: Iterable[SlotEntry]) -> list[tuple[str, UUID | None]]:
    return [(e.text, e.fact_id) for e in entries]


def _normalise(text: str) -> str:
    return " ".join(text.casefold().split())


def _entry(fact: MemorizedFact) -> SlotEntry:
    return SlotEntry(
        text=" ".join(fact.content.split()),
        fact_id=fact.id,
        message_ids=fact.source_message_ids,
        at=fact.last_reinforced_at or fact.timestamp,
    )


def is_confirmed(fact: MemorizedFact) -> bool:
    """A fact the slots take: stated by the user, current and lasting (a dated situation stays a fact), and not
    sealed (the slots are stored in the clear; a sealed fact reaches the context by rank instead)."""
    lasting = fact.category != "fact" or fact.expires_at is None
    return (
        fact.source == "explicit"
        and fact.invalid_at is None
        and fact.category in _CATEGORY_SLOT
        and lasting
        and not fact.sensitive
    )


def patch_from_facts(
    slots: Slots,
    facts: Sequence[MemorizedFact] = (),
    *,
    superseded: Iterable[UUID] = (),
    preferences: UserPreferences | None = None,
    max_entries: int = MAX_ENTRIES_PER_FIELD,
) -> SlotPatch:
    """The patch that brings `slots` up to date with newly stored `facts` and `superseded` fact ids.

    Only confirmed facts (`is_confirmed`) are taken; a superseded fact's entry is removed wherever it is; a
    fact whose text already fills its field moves to the front instead of repeating. `preferences`
    (merged as `MemoryManager.update_memory` merges them) replaces the profile.
    """
    gone = set(superseded)
    touched: dict[SlotField, list[SlotEntry]] = {}
    if gone:
        for name, entries in slots.fields.items():
            if any(e.fact_id in gone for e in entries):
                touched[name] = [e for e in entries if e.fact_id not in gone]
    for fact in sorted(facts, key=lambda f: f.last_reinforced_at or f.timestamp):
        if not is_confirmed(fact) or fact.id in gone:
            continue
        name = _CATEGORY_SLOT[fact.category]
        current = touched.get(name, slots.get(name))
        key = _normalise(fact.content)
        kept = [e for e in current if _normalise(e.text) != key and e.fact_id != fact.id]
        touched[name] = [_entry(fact), *kept][:max_entries]
    if preferences is not None and not preferences.is_empty():
        touched["profile"] = _profile_entries(merge_preferences(preferences_from_slots(slots), preferences))
    changed = {name: entries for name, entries in touched.items() if _texts(entries) != _texts(slots.get(name))}
    return SlotPatch(expected={name: slots.get(name) for name in changed}, new=changed)


def slots_from_facts(
    facts: Sequence[MemorizedFact], *, preferences: UserPreferences | None = None, keep: Slots | None = None
) -> Slots:
    """The slots rebuilt from the user's current facts (a full resync); the fields no fact fills
    (`targets`, `progress_markers`, `reminder_pref`, and the profile, into which `preferences` are merged)
    are kept from `keep`."""
    fields: dict[SlotField, list[SlotEntry]] = {}
    if keep is not None:
        # Fields no fact fills; the profile too unless new preferences are given (they are merged into it).
        for name in ("targets", "progress_markers", "reminder_pref", "profile"):
            if keep.get(name):
                fields[name] = keep.get(name)
    return patch_from_facts(Slots(fields=fields), facts, preferences=preferences).apply(Slots(fields=fields))


_PROFILE_KEYS = ("materials", "quantities", "style", "industry", "location")


def _profile_entries(prefs: UserPreferences) -> list[SlotEntry]:
    values: list[tuple[str, str | None]] = [
        ("materials", ", ".join(prefs.preferred_materials) or None),
        ("quantities", prefs.typical_quantities),
        ("style", prefs.communication_style),
        ("industry", prefs.industry),
        ("location", prefs.location),
    ]
    return [SlotEntry(text=f"{key}: {value}") for key, value in values if value]


def with_profile(slots: Slots, preferences: UserPreferences) -> Slots:
    """`slots` with the profile field showing `preferences` (the stored preference rows, through
    `conversions.preferences_from_records`): the profile is a view of the one stored copy, never a second
    one, so `preferences_from_slots(with_profile(s, p)) == p`."""
    entries = _profile_entries(preferences)
    fields: dict[SlotField, list[SlotEntry]] = {"profile": entries} if entries else {}
    fields.update((name, list(values)) for name, values in slots.fields.items() if name != "profile")
    return Slots(fields=fields)


def merge_preferences(current: UserPreferences, new: UserPreferences) -> UserPreferences:
    """`new` merged into `current` as the manager merges preferences: materials added (newest first, no
    repeats), single values replaced when given."""
    seen = {m.casefold() for m in new.preferred_materials}
    return UserPreferences(
        preferred_materials=[
            *new.preferred_materials,
            *(m for m in current.preferred_materials if m.casefold() not in seen),
        ],
        typical_quantities=new.typical_quantities or current.typical_quantities,
        communication_style=new.communication_style or current.communication_style,
        industry=new.industry or current.industry,
        location=new.location or current.location,
    )


def preferences_from_slots(slots: Slots) -> UserPreferences:
    """`UserPreferences` as a view of the profile slot (the slots are the one copy)."""
    found: dict[str, str] = {}
    for entry in slots.get("profile"):
        key, sep, value = entry.text.partition(": ")
        if sep and key in _PROFILE_KEYS and value.strip():
            found[key] = value.strip()
    style = found.get("style")
    return UserPreferences(
        preferred_materials=[m.strip() for m in found.get("materials", "").split(",") if m.strip()],
        typical_quantities=found.get("quantities"),
        communication_style=style if style in ("technical", "simple") else None,  # type: ignore[arg-type]
        industry=found.get("industry"),
        location=found.get("location"),
    )


def render_slots(slots: Slots, counter: TokenCounter, *, max_tokens: int, skip: Iterable[SlotField] = ()) -> str:
    """The filled slots as compact lines within `max_tokens` ("" when empty).

    Fields are printed in `SLOT_FIELDS` order; when the budget is short the oldest entries of the last
    fields go first, then whole fields, so rejections and constraints are the last to be cut."""
    skipped = set(skip)
    fields = [(name, slots.get(name)) for name in SLOT_FIELDS if name not in skipped and slots.get(name)]

    def text(chosen: list[tuple[SlotField, list[SlotEntry]]]) -> str:
        return "\n".join(
            f"{_LABELS[name]}: " + "; ".join(one_line(e.text, 200) for e in entries) for name, entries in chosen
        )

    chosen = [(name, list(entries)) for name, entries in fields]
    while chosen and counter.count(text(chosen)) > max_tokens:
        # Drop the oldest entry of the last field; an emptied field goes.
        name, entries = chosen[-1]
        if len(entries) > 1:
            chosen[-1] = (name, entries[:-1])
        else:
            chosen.pop()
    return text(chosen)
