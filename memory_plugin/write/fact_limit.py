"""`FactLimit`: at most `max_facts` fact rows per user, so one user cannot grow the shared table without bound."""

from __future__ import annotations

from collections import OrderedDict
from uuid import UUID

from ..errors import MemoryLimitError, StoreError
from ..logs import LOG_PREFIX, logger
from ..store import LongTermStore

__all__ = ["FactLimit"]

_RECOUNT_MARGIN = 0.9
"""Within 10 % of the limit the count is read again from the store: deletes and other processes' writes are
then taken into account where it matters."""


class FactLimit:
    """Refuses a write that would take a user past `max_facts` fact rows (`MemoryLimitError`, nothing written).

    The count is read from the store once per user (`count_facts`), then moved by this process's inserts; it is
    read again near the limit. If the store cannot be counted (an outage: writes go to the journal) the write is
    let through and the count read again later. At most `max_users` counts are kept (least recently used go).
    """

    def __init__(self, max_facts: int, store: LongTermStore, *, max_users: int = 100_000) -> None:
        self.max_facts = max_facts
        self._store = store
        self._max_users = max_users
        self._counts: OrderedDict[UUID, int] = OrderedDict()

    async def check(self, user_id: UUID, new_facts: int) -> None:
        """Raise if `new_facts` more rows (at most; repeats reinforce instead) would pass the limit."""
        if new_facts <= 0:
            return
        count = self._counts.get(user_id)
        if count is None or count + new_facts > self.max_facts * _RECOUNT_MARGIN:
            try:
                count = await self._store.count_facts(user_id)
            except StoreError as exc:
                # An outage: the write goes to the journal unchecked, and the count is read at the next write.
                logger.debug("%s fact limit not checked (cannot count): %s", LOG_PREFIX, exc)
                return
            self._remember(user_id, count)
        if count + new_facts > self.max_facts:
            raise MemoryLimitError(
                f"user {user_id} has {count:,} facts; writing {new_facts:,} more would pass the limit of "
                f"{self.max_facts:,} (MEMORY_MAX_FACTS_PER_USER): forget or erase some first"
            )

    def added(self, user_id: UUID, inserted: int) -> None:
        """Count rows a write inserted."""
        count = self._counts.get(user_id)
        if count is not None:
            self._remember(user_id, count + inserted)

    def _remember(self, user_id: UUID, count: int) -> None:
        self._counts[user_id] = count
        self._counts.move_to_end(user_id)
        while len(self._counts) > self._max_users:
            self._counts.popitem(last=False)
