"""Short-term sessions shared by workers, in Postgres (`PostgresSessionStore`) and Redis (`RedisSessionStore`):
the `SessionBackend` contract (window, entities, intents, TTL, per-user cap, owner rule) on each, and one session
shared by two OS processes with no message lost."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from memory_plugin.errors import SessionLimitError, StoreLimitError
from memory_plugin.models import Message
from memory_plugin.session import SessionBackend
from memory_plugin.session.postgres_store import PostgresSessionStore
from memory_plugin.session.redis_store import RedisSessionStore

ROOT = Path(__file__).resolve().parents[1]
TTL = 600.0
A, B = uuid4(), uuid4()


LIMITS: dict[str, Any] = {
    "max_messages": 5, "ttl_seconds": TTL, "max_sessions_per_user": 3, "max_entity_values_per_kind": 3,
    "max_entity_values": 4, "max_intents": 2,
}  # fmt: skip


@pytest.fixture(params=["postgres", "redis"])
def store(request: pytest.FixtureRequest, clock: Any) -> Iterator[PostgresSessionStore | RedisSessionStore]:
    """Each networked backend with the same limits (Redis: under a key prefix of its own)."""
    s: PostgresSessionStore | RedisSessionStore
    if request.param == "postgres":
        s = PostgresSessionStore.connect(request.getfixturevalue("database_url"), **LIMITS, clock=clock)
    else:
        url = request.getfixturevalue("redis_url")
        s = RedisSessionStore.connect(url, prefix=f"test-{uuid4().hex}", **LIMITS, clock=clock)
    yield s
    s.close()


@pytest.fixture
def sid() -> str:
    """A session id no other test uses (the table is shared by the test session)."""
    return f"s-{uuid4().hex}"


def msg(text: str) -> Message:
    return Message(role="user", content=text)


def test_window_entities_and_intents(store: SessionBackend, sid: str) -> None:
    for i in range(7):
        store.add_message(sid, msg(f"m{i}"), user_id=A)
    store.update_entities(sid, {"materials": ["Aluminio 7075", "aluminio 7075", "latón"]}, user_id=A)
    store.add_intent(sid, "budget_request", user_id=A)
    store.add_intent(sid, "budget_request", user_id=A)
    snap = store.snapshot(sid, user_id=A)
    assert [m.content for m in snap.messages] == ["m2", "m3", "m4", "m5", "m6"]
    assert store.messages_seen(sid, user_id=A) == 7
    assert snap.entities == {"materials": ["Aluminio 7075", "latón"]}
    assert snap.intents == ["budget_request"]


def test_limits_refuse_the_whole_update_and_keep_what_is_stored(store: SessionBackend, sid: str) -> None:
    store.update_entities(sid, {"materials": ["a1", "a2"]}, user_id=A)
    with pytest.raises(SessionLimitError, match="per_kind"):
        store.update_entities(sid, {"materials": ["a3", "a4"], "services": ["x"]}, user_id=A)
    with pytest.raises(SessionLimitError, match="max_session_entity_values=4"):
        store.update_entities(sid, {"services": ["s1", "s2", "s3"]}, user_id=A)
    store.add_intent(sid, "one", user_id=A)
    store.add_intent(sid, "two", user_id=A)
    with pytest.raises(SessionLimitError, match="intents"):
        store.add_intent(sid, "three", user_id=A)
    snap = store.snapshot(sid, user_id=A)
    assert snap.entities == {"materials": ["a1", "a2"]}
    assert snap.intents == ["one", "two"]


def test_expiry_needs_no_cron_and_frees_the_id(store: SessionBackend, sid: str, clock: Any) -> None:
    assert store.snapshot(sid, user_id=A).messages == []  # reading binds nothing
    store.add_message(sid, msg("de B"), user_id=B)
    clock.advance(TTL - 1)
    assert store.messages_seen(sid, user_id=B) == 1
    clock.advance(TTL)
    assert store.snapshot(sid, user_id=B).messages == []  # gone without any sweep
    store.add_message(sid, msg("de A"), user_id=A)  # the id is free again, and the session starts empty
    assert [m.content for m in store.snapshot(sid, user_id=A).messages] == ["de A"]
    other = f"{sid}-2"
    store.add_message(other, msg("x"), user_id=A)
    clock.advance(TTL + 1)
    assert store.expire() >= 2
    assert store.drop(other, user_id=A) is False


def test_a_user_opening_sessions_evicts_their_own_oldest(store: SessionBackend, clock: Any) -> None:
    user = uuid4()
    victim = f"victim-{uuid4().hex}"
    store.add_message(victim, msg("pedido de 50 piezas"), user_id=B)
    for i in range(6):
        clock.advance(1)
        store.add_message(f"flood-{user}-{i}", msg("x"), user_id=user)
    assert [store.messages_seen(f"flood-{user}-{i}", user_id=user) for i in range(6)] == [0, 0, 0, 1, 1, 1]
    assert [m.content for m in store.snapshot(victim, user_id=B).messages] == ["pedido de 50 piezas"]


WORKER = """
import sys
from uuid import UUID
from memory_plugin.models import Message
backend, url, session, user, worker = sys.argv[1], sys.argv[2], sys.argv[3], UUID(sys.argv[4]), sys.argv[5]
if backend == "postgres":
    from memory_plugin.session.postgres_store import PostgresSessionStore as Store
else:
    from memory_plugin.session.redis_store import RedisSessionStore as Store
store = Store.connect(url, max_messages=500)
for i in range(60):
    store.add_message(session, Message(role="user", content=f"{worker}-{i}"), user_id=user)
store.close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_two_processes_share_one_session_and_lose_no_message(
    request: pytest.FixtureRequest, backend: str, sid: str
) -> None:
    url = request.getfixturevalue("database_url" if backend == "postgres" else "redis_url")
    user: UUID = uuid4()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, backend, url, sid, str(user), name], env=env)
        for name in ("w1", "w2")
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    reader: PostgresSessionStore | RedisSessionStore = (
        PostgresSessionStore.connect(url, max_messages=500)
        if backend == "postgres"
        else RedisSessionStore.connect(url, max_messages=500)
    )
    try:
        snap = reader.snapshot(sid, user_id=user)
        assert reader.messages_seen(sid, user_id=user) == 120
    finally:
        reader.close()
    contents = [m.content for m in snap.messages]
    assert sorted(contents) == sorted(f"{w}-{i}" for w in ("w1", "w2") for i in range(60))
    for w in ("w1", "w2"):  # each process's messages in the order it wrote them
        mine = [c for c in contents if c.startswith(w)]
        assert mine == [f"{w}-{i}" for i in range(60)]


async def test_two_managers_with_the_postgres_backend_share_a_session(pg_settings: Any, sid: str) -> None:
    from memory_plugin import MemoryManager

    settings = pg_settings.model_copy(update={"session_backend": "postgres"})
    user = uuid4()
    async with MemoryManager.open(settings) as first, MemoryManager.open(settings) as second:
        await first.add_message(sid, msg("Necesito 40 soportes anodizados"), user_id=user)
        short = await second.get_short_term(sid, user_id=user)
        assert [m.content for m in short.messages] == ["Necesito 40 soportes anodizados"]
        assert (await second.describe())["live_sessions"] >= 1


def test_a_write_over_the_databases_size_bound_is_a_typed_refusal(database_url: str, sid: str) -> None:
    store = PostgresSessionStore.connect(database_url, max_entity_values_per_kind=3, max_entity_values=3)
    try:
        store.update_entities(sid, {"materials": ["latón"]}, user_id=A)
        # Random hex (about 1.2 MB stored once compressed) passes the entities' 1 MB bound of the table.
        huge = [os.urandom(400_000).hex() for _ in range(2)]
        with pytest.raises(StoreLimitError, match="memory_sessions_state_bound"):
            store.update_entities(sid, {"materials": huge}, user_id=A)
        assert store.snapshot(sid, user_id=A).entities == {"materials": ["latón"]}  # what was stored stays
    finally:
        store.close()
