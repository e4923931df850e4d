"""The session rules every `SessionBackend` keeps, run with the same assertions on the RAM, Postgres and Redis stores:
sessions keyed by (user, session id), anonymous sessions a namespace of their own, the calls without a user
resolved as `session/base.py` says, and the design's call order (`get_memory_context(s, u)` then session-only
writes) through the public API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
from pydantic import SecretStr

from memory_plugin import InvalidMemoryInputError, MemoryManager, MemorySettings, Message, SessionStore
from memory_plugin.errors import SessionAmbiguousError, SessionOwnershipError
from memory_plugin.session import SessionBackend
from memory_plugin.session.postgres_store import PostgresSessionStore
from memory_plugin.session.redis_store import RedisSessionStore

TTL = 600.0


def msg(text: str, role: str = "user") -> Message:
    return Message(role=role, content=text)  # type: ignore[arg-type]


def _postgres(request: pytest.FixtureRequest, clock: Any) -> SessionBackend:
    store = PostgresSessionStore.connect(request.getfixturevalue("database_url"), ttl_seconds=TTL, clock=clock)
    request.addfinalizer(store.close)
    return store


def _redis(request: pytest.FixtureRequest, clock: Any) -> SessionBackend:
    store = RedisSessionStore.connect(
        request.getfixturevalue("redis_url"), prefix=f"test-{uuid4().hex}", ttl_seconds=TTL, clock=clock
    )
    request.addfinalizer(store.close)
    return store


SESSION_BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Any], SessionBackend]] = {
    "memory": lambda _, clock: SessionStore(ttl_seconds=TTL, clock=clock),
    "postgres": _postgres,
    "redis": _redis,
}
"""Every session backend: each test below runs on each."""


@pytest.fixture(params=sorted(SESSION_BACKENDS))
def backend(request: pytest.FixtureRequest, clock: Any) -> SessionBackend:
    return SESSION_BACKENDS[request.param](request, clock)


@pytest.fixture
def ids() -> Iterator[Callable[[str], str]]:
    """Session ids of this test only (the Postgres table is shared by the run): `ids("chat-1")`."""
    prefix = uuid4().hex[:8]
    return lambda name: f"{prefix}-{name}"


@pytest.fixture
def a() -> UUID:
    return uuid4()


@pytest.fixture
def b() -> UUID:
    return uuid4()


def contents(backend: SessionBackend, session_id: str, user_id: UUID | None = None) -> list[str]:
    return [m.content for m in backend.snapshot(session_id, user_id=user_id).messages]


def test_two_users_each_have_their_own_session_of_one_id(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID, b: UUID
) -> None:
    chat = ids("chat-1")
    backend.add_message(chat, msg("presupuesto de B: 3000 euros"), user_id=b)  # B names chat-1 first
    backend.update_entities(chat, {"materials": "latón"}, user_id=b)
    backend.add_intent(chat, "budget_request", user_id=b)
    # A uses the same id: no refusal (no squatting), and A's session is A's alone (no crossing).
    assert backend.snapshot(chat, user_id=a).messages == []
    assert backend.add_message(chat, msg("soy A"), user_id=a) == 1
    backend.update_entities(chat, {"materials": "oro"}, user_id=a)
    backend.add_intent(chat, "complaint", user_id=a)

    mine, theirs = backend.snapshot(chat, user_id=a), backend.snapshot(chat, user_id=b)
    assert ([m.content for m in mine.messages], mine.entities, mine.intents) == (
        ["soy A"], {"materials": ["oro"]}, ["complaint"]
    )  # fmt: skip
    assert ([m.content for m in theirs.messages], theirs.entities, theirs.intents) == (
        ["presupuesto de B: 3000 euros"], {"materials": ["latón"]}, ["budget_request"]
    )  # fmt: skip
    assert (backend.messages_seen(chat, user_id=a), backend.messages_seen(chat, user_id=b)) == (1, 1)
    assert backend.drop(chat, user_id=a) is True  # A drops A's, B's stays
    assert contents(backend, chat, b) == ["presupuesto de B: 3000 euros"]
    assert backend.drop(chat, user_id=a) is False


def test_the_same_ids_of_two_users_never_mix(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID, b: UUID
) -> None:
    for i in range(20):
        backend.add_message(ids(f"chat-{i}"), msg(f"de A {i}"), user_id=a)
        backend.add_message(ids(f"chat-{i}"), msg(f"de B {i}"), user_id=b)
    for i in range(20):
        assert contents(backend, ids(f"chat-{i}"), a) == [f"de A {i}"]
        assert contents(backend, ids(f"chat-{i}"), b) == [f"de B {i}"]


def test_the_design_order_binds_the_session_and_session_only_writes_reach_it(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID, b: UUID
) -> None:
    s = ids("s1")
    assert backend.snapshot(s, user_id=a, bind=True).messages == []  # the turn's start binds s to A
    for i in range(3):
        backend.add_message(s, msg(f"m{i}"))  # no user: the one live session of that id, A's
    backend.update_entities(s, {"materials": ["7075"]})
    backend.add_intent(s, "budget_request")
    snap = backend.snapshot(s, user_id=a)
    assert [m.content for m in snap.messages] == ["m0", "m1", "m2"]
    assert (snap.entities, snap.intents) == ({"materials": ["7075"]}, ["budget_request"])
    assert backend.snapshot(s, user_id=b).messages == []  # another user sees nothing of it
    assert backend.messages_seen(s, user_id=a) == 3


def test_a_session_only_write_that_could_mean_two_owners_asks_for_the_user(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID, b: UUID
) -> None:
    s, mixed = ids("shared"), ids("mixed")
    backend.snapshot(s, user_id=a, bind=True)
    backend.snapshot(s, user_id=b, bind=True)
    backend.add_message(mixed, msg("anónimo"))  # an anonymous session ...
    backend.add_message(mixed, msg("de A"), user_id=a)  # ... and A's, of one id
    for call in (
        lambda: backend.add_message(s, msg("¿de quién?")),
        lambda: backend.update_entities(s, {"materials": "oro"}),
        lambda: backend.add_intent(s, "complaint"),
        lambda: backend.add_message(mixed, msg("¿de quién?")),
    ):
        with pytest.raises(SessionAmbiguousError, match="pass the user_id") as caught:
            call()
        assert isinstance(caught.value, SessionOwnershipError)
        assert isinstance(caught.value, InvalidMemoryInputError)
        assert str(a) not in str(caught.value)
        assert str(b) not in str(caught.value)
    # Nothing was written anywhere.
    for user in (a, b):
        snap = backend.snapshot(s, user_id=user)
        assert (snap.messages, snap.entities, snap.intents) == ([], {}, [])
    assert contents(backend, mixed) == ["anónimo"]
    assert contents(backend, mixed, a) == ["de A"]


def test_a_read_without_a_user_never_sees_a_users_session(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID
) -> None:
    s = ids("private")
    backend.add_message(s, msg("mi presupuesto máximo es 3000 euros"), user_id=a)
    for call in (
        lambda: backend.snapshot(s),
        lambda: backend.messages_seen(s),
        lambda: backend.drop(s),
    ):
        with pytest.raises(SessionOwnershipError, match="pass its user_id") as caught:
            call()
        assert str(a) not in str(caught.value)
    assert contents(backend, s, a) == ["mi presupuesto máximo es 3000 euros"]


def test_anonymous_sessions_are_a_namespace_of_their_own(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID
) -> None:
    anon = ids("anon")
    backend.add_message(anon, msg("hola"))
    backend.update_entities(anon, {"services": "fresado"})
    assert backend.snapshot(anon, user_id=a).messages == []  # never read into a user's session
    backend.add_message(anon, msg("soy A"), user_id=a)
    assert contents(backend, anon) == ["hola"]
    assert backend.snapshot(anon).entities == {"services": ["fresado"]}
    assert contents(backend, anon, a) == ["soy A"]
    assert backend.drop(anon) is True
    assert contents(backend, anon, a) == ["soy A"]


def test_reading_an_unknown_session_binds_nothing_and_a_gone_session_frees_its_id(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID, b: UUID, clock: Any
) -> None:
    s = ids("s1")
    assert backend.snapshot(s, user_id=a).messages == []  # without bind: no session made
    backend.add_message(s, msg("sin usuario"))  # so this starts an anonymous one, not A's
    assert contents(backend, s) == ["sin usuario"]
    assert contents(backend, s, a) == []
    backend.add_message(s, msg("de B"), user_id=b)
    clock.advance(TTL)
    # Both expired: the id is free, a session-only write starts over anonymous, and B's starts empty.
    backend.add_message(s, msg("otra vez"))
    assert contents(backend, s) == ["otra vez"]
    assert contents(backend, s, b) == []


def test_an_expired_session_of_one_owner_does_not_make_a_write_ambiguous(
    backend: SessionBackend, ids: Callable[[str], str], a: UUID, b: UUID, clock: Any
) -> None:
    s = ids("s1")
    backend.add_message(s, msg("de A, hace rato"), user_id=a)
    clock.advance(TTL - 10)
    backend.snapshot(s, user_id=b, bind=True)
    clock.advance(20)  # A's is now idle past the TTL, B's is not
    backend.add_message(s, msg("para B"))
    assert contents(backend, s, b) == ["para B"]
    assert contents(backend, s, a) == []


def test_the_per_user_cap_evicts_only_that_users_sessions(clock: Any, a: UUID, b: UUID) -> None:
    store = SessionStore(ttl_seconds=TTL, max_sessions_per_user=2, clock=clock)
    store.add_message("chat-1", msg("B 1"), user_id=b)
    for i in range(1, 4):  # A opens 3 sessions of the ids B uses too: A's oldest goes, B's stays
        clock.advance(1)
        store.add_message(f"chat-{i}", msg(f"A {i}"), user_id=a)
    assert contents(store, "chat-1", b) == ["B 1"]
    assert contents(store, "chat-1", a) == []
    assert [contents(store, f"chat-{i}", a) for i in (2, 3)] == [["A 2"], ["A 3"]]


# --- through the public API --------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "postgres", "redis"])
async def manager(request: pytest.FixtureRequest, pg_settings: MemorySettings) -> AsyncIterator[MemoryManager]:
    """A manager on Postgres long-term memory with each session backend."""
    update: dict[str, Any] = {"session_backend": request.param}
    if request.param == "redis":
        update["redis_url"] = SecretStr(request.getfixturevalue("redis_url"))
    async with MemoryManager.open(pg_settings.model_copy(update=update)) as memory:
        yield memory


async def test_the_design_call_order_through_the_public_api(
    manager: MemoryManager, ids: Callable[[str], str], a: UUID, b: UUID
) -> None:
    s, shared = ids("chat"), ids("chat-1")
    assert (await manager.get_memory_context(s, a)).short_term.messages == []
    for i in range(25):
        await manager.add_message(s, msg(f"mensaje {i}", "user" if i % 2 == 0 else "assistant"))
    await manager.update_session_entities(s, {"materials": ["aluminio 7075"], "quantities": "40"})
    await manager.update_session_entities(s, {"materials": ["Aluminio 7075", "latón"]})
    await manager.update_session_intents(s, "budget_request")

    ctx = await manager.get_memory_context(s, a)
    assert [m.content for m in ctx.short_term.messages] == [f"mensaje {i}" for i in range(5, 25)]
    assert ctx.short_term.entities == {"materials": ["aluminio 7075", "latón"], "quantities": ["40"]}
    assert ctx.short_term.intents == ["budget_request"]

    other = await manager.get_memory_context(s, b)  # another user, same id: nothing of A's
    assert (other.short_term.messages, other.short_term.entities, other.short_term.intents) == ([], {}, [])
    # Now two users hold `s`: a session-only call must say whose.
    with pytest.raises(SessionAmbiguousError):
        await manager.add_message(s, msg("¿de quién?"))

    # Ids shared by two users do not collide, whoever came first.
    await manager.add_message(shared, msg("de B"), user_id=b)
    await manager.add_message(shared, msg("de A"), user_id=a)
    assert [m.content for m in (await manager.get_memory_context(shared, a)).short_term.messages] == ["de A"]
    assert [m.content for m in (await manager.get_memory_context(shared, b)).short_term.messages] == ["de B"]
