"""The Postgres session store on the manager's one pool is awaited on the event loop by every async caller (the
request path, the extraction runner, the sweeper): none of them goes through the synchronous `SessionBackend`
calls, which would need a worker thread."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from memory_plugin import MemoryManager, MemorySettings, Message


def rows_of(admin_conn: psycopg.Connection[Any], session_id: str) -> int:
    row = admin_conn.execute(
        "select count(*) from memory_private.memory_sessions where session_id = %s", (session_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_the_runner_and_the_sweeper_await_postgres_sessions_on_the_loop(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = pg_settings.model_copy(
        update={
            "session_backend": "postgres",
            "embedding_model": "none",
            "session_ttl_seconds": 1.0,
            "session_sweep_interval_seconds": 0.05,
        }
    )
    async with MemoryManager.open(settings) as memory:
        store = memory._sessions

        def threaded(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a synchronous session call: it would run in a worker thread")

        for name in ("add_message", "update_entities", "add_intent", "snapshot", "expire"):
            monkeypatch.setattr(store, name, threaded)

        user, session = uuid4(), f"s-{uuid4().hex}"
        await memory.get_memory_context(session, user)  # binds the session to the user
        await memory.add_message(session, Message(role="user", content="Recuerda que prefiero latón."))
        await memory.update_session_entities(session, {"materials": ["latón"]})
        await memory.update_session_intents(session, "budget_request")
        run = await memory.extract_if_due(session, user, end_of_request=True)
        assert run.error is None
        scheduled = await memory.schedule_extraction(session, user, end_of_request=True)
        assert scheduled.error is None
        assert (await memory.get_short_term(session, user_id=user)).entities == {"materials": ["latón"]}
        assert rows_of(admin_conn, session) == 1

        # Nobody touches the session now: only the sweeper can delete it, once it is idle past the TTL.
        for _ in range(100):
            if not rows_of(admin_conn, session):
                break
            await asyncio.sleep(0.05)
        assert rows_of(admin_conn, session) == 0


async def test_concurrent_calls_on_the_pool_create_one_session_and_lose_nothing(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any]
) -> None:
    settings = pg_settings.model_copy(
        update={"session_backend": "postgres", "embedding_model": "none", "max_messages_per_session": 100}
    )
    async with MemoryManager.open(settings) as memory:
        user, session = uuid4(), f"s-{uuid4().hex}"
        # Every first call races to create the session: one row, each message once.
        seen = await asyncio.gather(
            *(memory.add_message(session, Message(role="user", content=f"m{i}"), user_id=user) for i in range(20))
        )
        assert sorted(seen) == list(range(1, 21))
        await asyncio.gather(
            *(memory.update_session_entities(session, {"part": [f"p{i}"]}, user_id=user) for i in range(10)),
            *(memory.add_message(session, Message(role="user", content=f"n{i}")) for i in range(10)),
        )
        short = await memory.get_short_term(session, user_id=user)
        assert sorted(m.content for m in short.messages) == sorted(
            [f"m{i}" for i in range(20)] + [f"n{i}" for i in range(10)]
        )
        assert sorted(short.entities["part"]) == sorted(f"p{i}" for i in range(10))
        assert rows_of(admin_conn, session) == 1


async def test_each_call_is_at_most_two_round_trips(
    pg_settings: MemorySettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = pg_settings.model_copy(update={"session_backend": "postgres", "embedding_model": "none"})
    async with MemoryManager.open(settings) as memory:
        user, session = uuid4(), f"s-{uuid4().hex}"
        await memory.get_memory_context(session, user)  # binds the session: the calls below find it
        trips: list[str] = []
        pipeline, execute = psycopg.AsyncConnection.pipeline, psycopg.AsyncConnection.execute

        def counted_pipeline(conn: psycopg.AsyncConnection[Any]) -> Any:
            trips.append("pipeline")  # one `Sync`: one round trip, however many statements it carries
            return pipeline(conn)

        async def counted_execute(conn: psycopg.AsyncConnection[Any], *args: Any, **kwargs: Any) -> Any:
            if conn._pipeline is None:
                trips.append("statement")
            return await execute(conn, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncConnection, "pipeline", counted_pipeline)
        monkeypatch.setattr(psycopg.AsyncConnection, "execute", counted_execute)

        async def round_trips(call: Any) -> int:
            trips.clear()
            await call
            return len(trips)

        assert await round_trips(memory.add_message(session, Message(role="user", content="hola"), user_id=user)) == 1
        assert await round_trips(memory.add_message(session, Message(role="user", content="sin usuario"))) == 1
        assert await round_trips(memory.get_short_term(session, user_id=user)) == 1
        assert await round_trips(memory.update_session_entities(session, {"materials": ["latón"]})) == 2
        assert await round_trips(memory.update_session_intents(session, "budget_request", user_id=user)) == 2


async def test_describe_counts_live_sessions_on_the_pool_without_a_thread(
    pg_settings: MemorySettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = pg_settings.model_copy(update={"session_backend": "postgres", "embedding_model": "none"})
    async with MemoryManager.open(settings) as memory:
        before = (await memory.describe())["live_sessions"]
        for _ in range(2):
            await memory.get_memory_context(f"s-{uuid4().hex}", uuid4())  # a live session each

        def threaded(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the session count went through a worker thread")

        monkeypatch.setattr(ThreadPoolExecutor, "submit", threaded)
        monkeypatch.setattr(asyncio.get_running_loop(), "run_in_executor", threaded)
        assert (await memory.describe())["live_sessions"] == before + 2


async def test_a_synchronous_call_on_the_pools_own_loop_is_refused_not_left_waiting(
    pg_settings: MemorySettings,
) -> None:
    settings = pg_settings.model_copy(update={"session_backend": "postgres", "embedding_model": "none"})
    async with MemoryManager.open(settings) as memory:
        with pytest.raises(RuntimeError, match="on_loop"):
            memory._sessions.snapshot(f"s-{uuid4().hex}", user_id=uuid4())
        with pytest.raises(RuntimeError, match="on_loop"):
            len(memory._sessions)  # type: ignore[arg-type]  # the store is Sized, its protocol is not
