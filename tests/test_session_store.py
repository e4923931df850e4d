"""Short-term memory (`SessionStore`): TTL, the message window, entity and intent merging, LRU eviction and
concurrency. Time is a `FakeClock` moved by hand, so nothing here sleeps."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest

from memory_plugin import InMemoryStore, MemoryManager, MemorySettings, Message, SessionStore
from memory_plugin.errors import SessionLimitError

TTL = 3600.0


def msg(text: str, role: str = "user") -> Message:
    return Message(role=role, content=text)  # type: ignore[arg-type]


@pytest.fixture
def store(clock: Any) -> SessionStore:
    return SessionStore(ttl_seconds=TTL, clock=clock)


@pytest.fixture
def fine_grained_thread_switching() -> Iterator[None]:
    """Make the interpreter switch threads very often, so a missing lock would show up as lost updates."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


# --- TTL -------------------------------------------------------------------------------------------------


def test_session_idle_for_ttl_is_gone_on_next_access_without_expire(store: SessionStore, clock: Any) -> None:
    store.add_message("s1", msg("Necesito 50 piezas"))
    store.update_entities("s1", {"materials": "aluminio 7075"})
    store.add_intent("s1", "budget_request")

    clock.advance(TTL - 1)
    assert [m.content for m in store.snapshot("s1").messages] == ["Necesito 50 piezas"]  # also counts as activity

    clock.advance(TTL)  # idle for exactly the TTL since the snapshot
    snap = store.snapshot("s1")
    assert snap.messages == []
    assert snap.entities == {}
    assert snap.intents == []
    assert store.messages_seen("s1") == 0
    assert "s1" not in store
    assert len(store) == 0
    assert store.expired_total == 1
    assert store.expire() == 0  # already released by the access itself


def test_every_kind_of_activity_refreshes_the_ttl(store: SessionStore, clock: Any) -> None:
    store.add_message("s1", msg("hola"))
    for touch in (
        lambda: store.add_message("s1", msg("otra")),
        lambda: store.update_entities("s1", {"materials": ["latón"]}),
        lambda: store.add_intent("s1", "question"),
        lambda: store.snapshot("s1"),
    ):
        clock.advance(TTL * 0.9)
        touch()
    clock.advance(TTL * 0.9)  # 4.5 TTLs since creation, but never idle for a whole TTL
    snap = store.snapshot("s1")
    assert [m.content for m in snap.messages] == ["hola", "otra"]
    assert snap.entities == {"materials": ["latón"]}
    assert snap.intents == ["question"]
    assert store.expired_total == 0


def test_passive_reads_do_not_keep_a_session_alive(store: SessionStore, clock: Any) -> None:
    store.add_message("s1", msg("hola"))
    clock.advance(TTL * 0.6)
    assert store.messages_seen("s1") == 1
    assert "s1" in store
    clock.advance(TTL * 0.6)
    assert store.messages_seen("s1") == 0


def test_a_session_that_expired_starts_over_empty(store: SessionStore, clock: Any) -> None:
    store.add_message("s1", msg("antes"))
    store.update_entities("s1", {"materials": "acero"})
    clock.advance(TTL)
    assert store.add_message("s1", msg("después")) == 1
    snap = store.snapshot("s1")
    assert [m.content for m in snap.messages] == ["después"]
    assert snap.entities == {}


def test_expire_removes_exactly_the_idle_sessions_and_reports_the_count(store: SessionStore, clock: Any) -> None:
    store.add_message("old", msg("hola"))
    clock.advance(TTL / 2)
    for i in range(10_000):
        store.add_message(f"live-{i}", msg("hola"))
    clock.advance(TTL / 2)  # "old" has been idle for the TTL, the others for half of it

    assert store.expire() == 1
    assert store.expired_total == 1
    assert "old" not in store
    assert len(store) == 10_000
    assert all(f"live-{i}" in store for i in range(0, 10_000, 997))
    assert store.expire() == 0


def test_expiry_follows_last_activity_not_creation(store: SessionStore, clock: Any) -> None:
    for name in ("a", "b", "c", "d"):
        store.add_message(name, msg("hola"))
        clock.advance(10)
    clock.advance(TTL / 2)
    store.add_intent("a", "followup")  # the first created is now the most recently active
    store.snapshot("c")
    clock.advance(TTL / 2)  # b and d idle for > TTL; a and c for half of it

    assert store.expire() == 2
    assert "a" in store
    assert "c" in store
    assert "b" not in store
    assert "d" not in store


class _CountingOrderedDict(OrderedDict[str, Any]):
    """Counts how many sessions the expiry loop looks at (it reads one `values()` view per session)."""

    visits = 0

    def values(self) -> Any:
        type(self).visits += 1
        return super().values()


def test_expire_only_looks_at_the_sessions_it_removes(clock: Any) -> None:
    store = SessionStore(ttl_seconds=TTL, clock=clock)
    store._sessions = _CountingOrderedDict()  # instrument the store's single index
    for i in range(3):
        store.add_message(f"idle-{i}", msg("hola"))
    clock.advance(TTL / 2)
    for i in range(5_000):
        store.add_message(f"live-{i}", msg("hola"))
    clock.advance(TTL / 2)

    _CountingOrderedDict.visits = 0
    assert store.expire() == 3
    # 3 expired sessions plus the first live one, which stops the loop: never the 5,000 live sessions.
    assert _CountingOrderedDict.visits <= 4
    _CountingOrderedDict.visits = 0
    assert store.expire() == 0
    assert _CountingOrderedDict.visits <= 1


# --- message window ------------------------------------------------------------------------------------------


def test_window_keeps_the_last_20_messages_in_order_and_counts_all(store: SessionStore) -> None:
    seen = [store.add_message("s1", msg(f"mensaje {i}", "user" if i % 2 else "assistant")) for i in range(45)]
    assert seen == list(range(1, 46))
    snap = store.snapshot("s1")
    assert [m.content for m in snap.messages] == [f"mensaje {i}" for i in range(25, 45)]
    assert [m.role for m in snap.messages] == ["user" if i % 2 else "assistant" for i in range(25, 45)]
    assert store.messages_seen("s1") == 45


def test_window_size_is_configurable_and_per_session(clock: Any) -> None:
    store = SessionStore(max_messages=3, clock=clock)
    for i in range(5):
        store.add_message("a", msg(f"a{i}"))
    store.add_message("b", msg("b0"))
    assert [m.content for m in store.snapshot("a").messages] == ["a2", "a3", "a4"]
    assert [m.content for m in store.snapshot("b").messages] == ["b0"]
    assert store.messages_seen("a") == 5
    assert store.messages_seen("b") == 1


def test_snapshot_is_a_copy(store: SessionStore) -> None:
    store.add_message("s1", msg("hola"))
    store.update_entities("s1", {"materials": "latón"})
    store.add_intent("s1", "question")
    snap = store.snapshot("s1")
    snap.messages.clear()
    snap.entities["materials"].append("oro")
    snap.intents.append("hack")
    again = store.snapshot("s1")
    assert [m.content for m in again.messages] == ["hola"]
    assert again.entities == {"materials": ["latón"]}
    assert again.intents == ["question"]


def test_unknown_session_reads_empty_and_is_not_created(store: SessionStore) -> None:
    snap = store.snapshot("nobody")
    assert snap.messages == []
    assert snap.entities == {}
    assert snap.intents == []
    assert store.messages_seen("nobody") == 0
    assert len(store) == 0


# --- entities and intents ------------------------------------------------------------------------------------


def test_entities_merge_ignoring_case_accents_and_whitespace_keeping_first_spelling(store: SessionStore) -> None:
    store.update_entities("s1", {"materials": ["Aluminio 7075", "aluminio 7075"], "quantity": "50"})
    store.update_entities("s1", {"Materials": "ALUMINIO  7075"})  # kinds are case-insensitive too
    store.update_entities("s1", {" materials ": ["Latón", "laton", "LATÓN", "  latón  "]})
    store.update_entities("s1", {"materials": ["acero inoxidable", "Acero   Inoxidable."], "quantity": ["50", "100"]})
    store.update_entities("s1", {"services": ("Fresado CNC", "fresado cnc", "Anodizado")})

    assert store.snapshot("s1").entities == {
        "materials": ["Aluminio 7075", "Latón", "acero inoxidable"],
        "quantity": ["50", "100"],
        "services": ["Fresado CNC", "Anodizado"],
    }


def test_entity_numbers_are_kept_as_written(store: SessionStore) -> None:
    store.update_entities("s1", {"tolerance": ["Tolerancia ±0.05 mm", "tolerancia ±0,05 mm", "TOLERANCIA ±0.05 MM"]})
    assert store.snapshot("s1").entities == {"tolerance": ["Tolerancia ±0.05 mm", "tolerancia ±0,05 mm"]}


def test_blank_entity_kinds_and_values_are_ignored(store: SessionStore) -> None:
    store.update_entities("s1", {"materials": ["", "   ", "titanio"], "  ": "algo"})
    assert store.snapshot("s1").entities == {"materials": ["titanio"]}


def test_intents_are_unique_in_first_seen_order(store: SessionStore) -> None:
    for intent in ("budget_request", "question", "budget_request", " question ", "complaint", "question"):
        store.add_intent("s1", intent)
    assert store.snapshot("s1").intents == ["budget_request", "question", "complaint"]


def test_sessions_do_not_share_state(store: SessionStore) -> None:
    store.add_message("a", msg("de a"))
    store.update_entities("a", {"materials": "latón"})
    store.add_intent("a", "question")
    store.add_message("b", msg("de b"))
    b = store.snapshot("b")
    assert [m.content for m in b.messages] == ["de b"]
    assert b.entities == {}
    assert b.intents == []


# --- size cap ------------------------------------------------------------------------------------------------


def test_cap_evicts_the_least_recently_active_session_not_the_oldest(clock: Any) -> None:
    store = SessionStore(max_sessions=3, clock=clock)
    for name in ("a", "b", "c"):
        store.add_message(name, msg(f"hola {name}"))
        clock.advance(1)
    store.add_message("a", msg("sigo aquí"))  # "a" is the oldest created but now the most recently active
    clock.advance(1)

    store.add_message("d", msg("hola d"))
    assert len(store) == 3
    assert "b" not in store
    assert all(name in store for name in ("a", "c", "d"))
    assert [m.content for m in store.snapshot("a").messages] == ["hola a", "sigo aquí"]
    assert store.evicted_total == 1
    assert store.expired_total == 0

    clock.advance(1)
    store.snapshot("c")  # reading is activity too: with "a" read above, "d" is now the least recently active
    clock.advance(1)
    store.update_entities("e", {"materials": "cobre"})
    assert "d" not in store
    assert all(name in store for name in ("a", "c", "e"))
    assert store.evicted_total == 2


def test_updating_an_existing_session_at_the_cap_evicts_nothing(clock: Any) -> None:
    store = SessionStore(max_sessions=2, clock=clock)
    store.add_message("a", msg("1"))
    store.add_message("b", msg("1"))
    for i in range(10):
        store.add_message("a" if i % 2 else "b", msg(str(i)))
    assert len(store) == 2
    assert store.evicted_total == 0


def test_drop_forgets_a_session(store: SessionStore) -> None:
    store.add_message("s1", msg("hola"))
    assert store.drop("s1") is True
    assert store.drop("s1") is False
    assert store.snapshot("s1").messages == []


def test_invalid_limits_are_rejected() -> None:
    for kwargs in ({"max_messages": 0}, {"max_sessions": 0}, {"ttl_seconds": 0}, {"ttl_seconds": -1}):
        with pytest.raises(ValueError, match="must be"):
            SessionStore(**kwargs)  # type: ignore[arg-type]


# --- concurrency ------------------------------------------------------------------------------------------------


async def test_concurrent_tasks_lose_no_updates(store: SessionStore) -> None:
    tasks_n, per_task = 50, 200
    added_to_shared: list[str] = []

    async def worker(t: int) -> None:
        for i in range(per_task):
            content = f"t{t}-m{i}"
            store.add_message("shared", msg(content))
            added_to_shared.append(content)  # same step as the add: no await in between
            store.add_message(f"own-{t}", msg(content))
            store.update_entities("shared", {"materials": [f"material {t % 7}"]})
            store.add_intent("shared", f"intent-{t % 3}")
            if i % 10 == 0:
                await asyncio.sleep(0)

    await asyncio.gather(*(worker(t) for t in range(tasks_n)))

    assert store.messages_seen("shared") == tasks_n * per_task
    assert [m.content for m in store.snapshot("shared").messages] == added_to_shared[-20:]
    for t in range(tasks_n):
        assert store.messages_seen(f"own-{t}") == per_task
        assert [m.content for m in store.snapshot(f"own-{t}").messages] == [f"t{t}-m{i}" for i in range(180, 200)]
    snap = store.snapshot("shared")
    assert sorted(snap.entities["materials"]) == sorted(f"material {k}" for k in range(7))
    assert sorted(snap.intents) == ["intent-0", "intent-1", "intent-2"]


@pytest.mark.usefixtures("fine_grained_thread_switching")
def test_concurrent_threads_lose_no_updates(store: SessionStore) -> None:
    threads_n, per_thread = 8, 3_000
    messages = {t: [msg(f"t{t}-m{i}") for i in range(per_thread)] for t in range(threads_n)}
    returned: dict[int, list[int]] = {}
    by_count: dict[int, Message] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n + 1)

    def worker(t: int) -> None:
        try:
            start.wait()
            counts = []
            for i, m in enumerate(messages[t]):
                counts.append(store.add_message("shared", m))
                store.add_message(f"own-{t}", m)
                store.update_entities("shared", {"materials": [f"Material {i % 5}", f"MATERIAL {i % 5}"]})
                if i % 50 == 0:
                    store.snapshot("shared")
            returned[t] = counts
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        start.wait()
        for _ in range(500):
            snap = store.snapshot("shared")
            assert len(snap.messages) <= 20

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    workers.append(threading.Thread(target=reader))
    for th in workers:
        th.start()
    for th in workers:
        th.join()
    assert not errors

    total = threads_n * per_thread
    all_counts = sorted(c for counts in returned.values() for c in counts)
    assert all_counts == list(range(1, total + 1))  # every add got its own, consecutive count
    assert store.messages_seen("shared") == total
    for t in range(threads_n):
        assert returned[t] == sorted(returned[t])
        for m, c in zip(messages[t], returned[t], strict=True):
            by_count[c] = m
        assert store.messages_seen(f"own-{t}") == per_thread
        assert store.snapshot(f"own-{t}").messages == messages[t][-20:]
    # The window holds exactly the last 20 adds, in the order they happened.
    assert store.snapshot("shared").messages == [by_count[c] for c in range(total - 19, total + 1)]
    assert store.snapshot("shared").entities == {"materials": [f"Material {k}" for k in range(5)]}


@pytest.mark.usefixtures("fine_grained_thread_switching")
def test_concurrent_threads_respect_the_session_cap(clock: Any) -> None:
    store = SessionStore(max_sessions=100, clock=clock)
    threads_n, per_thread = 8, 1_000

    def worker(t: int) -> None:
        for i in range(per_thread):
            store.add_message(f"t{t}-s{i}", msg("hola"))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(store) == 100
    assert store.evicted_total == threads_n * per_thread - 100


# --- ownership: tests/test_session_contract.py runs the owner rules on every backend --------------------------

A = UUID("00000000-0000-4000-8000-00000000000a")
B = UUID("00000000-0000-4000-8000-00000000000b")


# --- bounded resources -------------------------------------------------------------------------------------------


def test_a_user_flooding_sessions_evicts_their_own_not_a_victims(clock: Any) -> None:
    store = SessionStore(max_sessions=1_000, max_sessions_per_user=100, clock=clock)
    store.add_message("victim", msg("mi pedido de 50 piezas"), user_id=B)
    clock.advance(1)
    for i in range(20_000):
        store.add_message(f"flood-{i}", msg("x"), user_id=A)
    assert [m.content for m in store.snapshot("victim", user_id=B).messages] == ["mi pedido de 50 piezas"]
    assert len(store) == 101  # the victim and the flooder's 100 most recent
    assert all(f"flood-{i}" in store for i in range(19_900, 20_000))
    assert "flood-19899" not in store
    assert store.evicted_total == 20_000 - 100


def test_the_byte_budget_evicts_the_least_recently_active_sessions(clock: Any) -> None:
    long = "x" * 10_000
    store = SessionStore(max_bytes=100_000, clock=clock)
    for i in range(5):
        store.add_message(f"s{i}", msg(long))
        clock.advance(1)
    store.snapshot("s0")  # activity: s1 is now the least recently active
    assert store.evicted_total == 0
    for i in range(5, 9):  # ~12 kB each: 8 fit in 100 kB, the 9th evicts one
        store.add_message(f"s{i}", msg(long))
        clock.advance(1)
    assert store.bytes_used <= 100_000
    assert (len(store), store.evicted_total) == (8, 1)
    assert "s0" in store  # read recently: kept over sessions written after it
    assert "s1" not in store
    for i in range(9, 100):
        store.add_message(f"s{i}", msg(long))
    assert store.bytes_used <= 100_000
    assert [f"s{i}" in store for i in range(100)] == [False] * 92 + [True] * 8


def test_messages_that_leave_the_window_leave_the_byte_count(clock: Any) -> None:
    store = SessionStore(max_messages=3, clock=clock)
    for _ in range(3):
        store.add_message("s1", msg("y" * 1_000))
    full = store.bytes_used
    for _ in range(100):
        store.add_message("s1", msg("y" * 1_000))
    assert store.bytes_used == full
    store.drop("s1")
    assert store.bytes_used == 0


def test_a_users_byte_budget_evicts_that_users_oldest_sessions_only(clock: Any) -> None:
    store = SessionStore(max_bytes_per_user=50_000, clock=clock)
    store.add_message("victim", msg("z" * 10_000), user_id=B)
    for i in range(20):
        store.add_message(f"a{i}", msg("z" * 10_000), user_id=A)
        clock.advance(1)
    assert "victim" in store
    assert [f"a{i}" in store for i in range(20)] == [False] * 16 + [True] * 4
    # One session over the budget alone is kept (it is the one being written).
    store.add_message("big", msg("w" * 60_000), user_id=A)
    assert [m.content[:1] for m in store.snapshot("big", user_id=A).messages] == ["w"]


def test_entity_values_are_capped_per_kind_and_per_session_all_or_nothing(clock: Any) -> None:
    store = SessionStore(max_entity_values_per_kind=3, max_entity_values=5, clock=clock)
    store.update_entities("s1", {"materials": ["latón", "acero"]})
    with pytest.raises(SessionLimitError, match="max_session_entity_values_per_kind=3"):
        store.update_entities("s1", {"materials": ["cobre", "zinc"], "quantity": "50"})
    assert store.snapshot("s1").entities == {"materials": ["latón", "acero"]}  # nothing of the refused update
    store.update_entities("s1", {"materials": ["LATÓN", "cobre"]})  # a known value does not count twice
    store.update_entities("s1", {"quantity": ["50", "100"]})
    with pytest.raises(SessionLimitError, match="max_session_entity_values=5"):
        store.update_entities("s1", {"services": "fresado"})
    assert store.snapshot("s1").entities == {"materials": ["latón", "acero", "cobre"], "quantity": ["50", "100"]}
    with pytest.raises(SessionLimitError):  # on a new session too, and it is not created
        store.update_entities("s2", {"materials": [f"m{i}" for i in range(4)]})
    assert "s2" not in store


def test_intents_are_capped(clock: Any) -> None:
    store = SessionStore(max_intents=2, clock=clock)
    store.add_intent("s1", "question")
    store.add_intent("s1", "budget_request")
    store.add_intent("s1", "question")  # known: no new intent
    with pytest.raises(SessionLimitError, match="max_session_intents=2"):
        store.add_intent("s1", "complaint")
    assert store.snapshot("s1").intents == ["question", "budget_request"]


def test_the_store_built_from_settings_has_the_settings_limits(clock: Any) -> None:
    settings = MemorySettings(
        max_messages_per_session=7,
        session_store_max_bytes=1_000_000,
        max_sessions_per_user=3,
        session_max_bytes_per_user=500_000,
        max_session_entity_values_per_kind=4,
        max_session_entity_values=9,
        max_session_intents=2,
    )
    store = SessionStore.from_settings(settings, clock=clock)
    limits = (store.max_messages, store.max_bytes, store.max_sessions_per_user, store.max_bytes_per_user)
    assert limits == (7, 1_000_000, 3, 500_000)
    assert (store.max_entity_values_per_kind, store.max_entity_values, store.max_intents) == (4, 9, 2)
    defaults = SessionStore.from_settings(MemorySettings(), clock=clock)
    assert (defaults.max_bytes, defaults.max_sessions_per_user, defaults.max_entity_values) == (512 << 20, 100, 200)


@pytest.mark.usefixtures("fine_grained_thread_switching")
def test_two_users_racing_for_the_same_session_ids_never_share_one(clock: Any) -> None:
    store = SessionStore(max_sessions_per_user=2_000, clock=clock)

    def worker(user: UUID) -> None:
        for i in range(2_000):
            store.add_message(f"chat-{i}", msg(f"{user} {i}"), user_id=user)

    threads = [threading.Thread(target=worker, args=(user,)) for user in (A, B)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # Each user has a session of every id (no one squats an id), holding only that user's message.
    for i in range(2_000):
        for user in (A, B):
            assert [m.content for m in store.snapshot(f"chat-{i}", user_id=user).messages] == [f"{user} {i}"]


class _GatedSessions(SessionStore):
    """A session store on the network, as the manager sees it: each `add_message` waits for a gate that only
    the event loop can open."""

    blocking = True

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.opened_while_waiting = False

    def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        self.opened_while_waiting = self.gate.wait(timeout=10)
        return super().add_message(session_id, message, user_id=user_id)


async def test_a_session_store_on_the_network_never_holds_the_event_loop() -> None:
    sessions = _GatedSessions()
    memory = MemoryManager(MemorySettings(embedding_model="none"), InMemoryStore(), sessions=sessions)
    user = uuid4()
    call = asyncio.ensure_future(memory.add_message("s1", Message(role="user", content="40 soportes"), user_id=user))
    await asyncio.sleep(0)  # the call starts; if it ran on the loop, this coroutine would not run again until it ends
    sessions.gate.set()
    assert await call == 1
    assert sessions.opened_while_waiting  # the loop went on (and opened the gate) while the call waited
    assert [m.content for m in (await memory.get_short_term("s1", user_id=user)).messages] == ["40 soportes"]
