"""`ContextCache`: each user's last context read from the database, served while the database is unreachable."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from ..rows import MemoryRecord

__all__ = ["CachedContext", "ContextCache"]

CachedContext = tuple[list[MemoryRecord], datetime]
"""The rows of the user's last context read, and when they were read (UTC)."""


class ContextCache:
    """The last context read per user, for at most `size` users (least recently used go first; 0: off)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[UUID, CachedContext] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, user_id: UUID) -> CachedContext | None:
        """The user's cached context (marked recently used), or None."""
        cached = self._entries.get(user_id)
        if cached is not None:
            self._entries.move_to_end(user_id)
        return cached

    def remember(
        self, user_id: UUID, records: Sequence[MemoryRecord], at: datetime, *, keep_ranked_facts: bool = False
    ) -> None:
        """Cache a context read at `at`. `keep_ranked_facts`: the read skipped ranked facts (a query-aware
        context), so the ones cached before stay."""
        if self.size <= 0:
            return
        cached = self._entries.get(user_id)
        kept = [r for r in cached[0] if _is_ranked_fact(r)] if keep_ranked_facts and cached is not None else []
        self._entries[user_id] = (list(records) + kept, at)
        self._entries.move_to_end(user_id)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def show_facts(self, user_id: UUID, facts: Sequence[MemoryRecord]) -> None:
        """Make `facts` the user's cached ranked facts: what a query-aware context showed. Rejections and the
        other kinds stay as read. No-op when the user has nothing cached."""
        cached = self._entries.get(user_id)
        if cached is not None:
            shown = {r.id for r in facts}  # a search may return a rejection too: keep one copy
            kept = [r for r in cached[0] if not _is_ranked_fact(r) and r.id not in shown]
            self._entries[user_id] = (kept + list(facts), cached[1])

    def forget(self, user_id: UUID, record_id: UUID) -> None:
        """Drop one row from the user's cached context: a row the user asked to forget is never served."""
        cached = self._entries.get(user_id)
        if cached is not None:
            self._entries[user_id] = ([r for r in cached[0] if r.id != record_id], cached[1])

    def drop_user(self, user_id: UUID) -> None:
        """Drop everything cached for the user (an erasure)."""
        self._entries.pop(user_id, None)


def _is_ranked_fact(record: MemoryRecord) -> bool:
    """A fact chosen by rank (rejections are read apart: every current one reaches the prompt)."""
    return record.kind == "fact" and record.category != "rejection"
