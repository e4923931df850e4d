"""The RAM budgets of the in-RAM session store: text counted by the RAM it takes, and anonymous sessions that
evict only each other."""

from __future__ import annotations

import tracemalloc
from typing import Any
from uuid import uuid4

from memory_plugin import Message, SessionStore


def msg(text: str) -> Message:
    return Message(role="user", content=text)


def test_the_byte_budget_counts_astral_plane_text_by_the_ram_it_takes(clock: Any) -> None:
    budget = 2_000_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store = SessionStore(max_bytes=budget, clock=clock)
        for i in range(400):  # 4 bytes a character: ~20 kB of RAM each, 8 MB in all
            store.add_message(f"s{i}", msg("😀" * 5_000))
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.bytes_used <= budget
    assert used <= budget * 1.2, f"{used:,} bytes of RAM for a budget of {budget:,}"
    assert store.evicted_total > 250


def test_a_flood_of_anonymous_sessions_never_evicts_a_signed_in_users_session(clock: Any) -> None:
    store = SessionStore(max_sessions=50, max_bytes=300_000, clock=clock)
    users = [uuid4() for _ in range(5)]
    for user in users:
        store.add_message("chat", msg("u" * 10_000), user_id=user)
        clock.advance(1)
    for i in range(2_000):  # a bot opening sessions without signing in: by count, then by bytes
        store.add_message(f"anon-{i}", msg("a" * (10 if i < 1_000 else 10_000)))
    assert all(store.snapshot("chat", user_id=user).messages for user in users)
    assert store.bytes_used <= 300_000
    assert len(store) <= 50
    assert "anon-1999" in store  # the anonymous ones evict each other, most recent kept

    # A signed-in user's new session evicts the least recently active anonymous session first.
    late = uuid4()
    store.add_message("chat", msg("l" * 10_000), user_id=late)
    assert all(store.snapshot("chat", user_id=user).messages for user in [*users, late])
    assert store.bytes_used <= 300_000
