"""`HealthNotesConsent`: what a deployment may keep of health statements. A module of its own, so that
`MemorySettings` names the type without importing the filters (their patterns take ~0.1 s of CPU to compile,
which a process that only embeds or reads never needs)."""

from __future__ import annotations

from typing import Literal

__all__ = ["HealthNotesConsent"]

HealthNotesConsent = Literal["off", "keep_notes"]
"""What a deployment may keep of health statements in verbatim notes (`MemorySettings.health_notes`).

- ``"off"`` (default): the speaker's own clinical detail becomes ``[health detail]`` / ``[dato de salud]``.
- ``"keep_notes"`` (the user explicitly agreed to keep health notes): the placeholder also says what the
  condition affects when the sentence names it (``[health detail: affects shifts]``), and a note made only of
  such detail is kept as that non-clinical note instead of being dropped. Raw clinical detail (diagnosis, drug,
  dose, result) is never kept in either mode."""
