"""Workflow checkpoints: saved and read back per session, bounded by `max_checkpoints` and pruned on save (also
under concurrent saves), invisible to other users, and refused when they are not a compact JSON snapshot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from memory_plugin.chats.checkpoints import (
    CheckpointStore,
    InMemoryCheckpointStore,
    PostgresCheckpointStore,
)
from memory_plugin.errors import InvalidMemoryInputError


@pytest_asyncio.fixture(loop_scope="session", params=["postgres", "memory"])
async def checkpoints(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[CheckpointStore]:
    if request.param == "memory":
        yield InMemoryCheckpointStore()
        return
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=8, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    yield PostgresCheckpointStore(pool)
    await pool.close()


def state(i: int) -> dict[str, Any]:
    return {"question": f"presupuesto {i}", "output": f"{i * 10} EUR", "route": "budget", "entities": {"n": [i]}}


async def test_save_then_resume_from_the_latest(checkpoints: CheckpointStore, user_id: UUID) -> None:
    await checkpoints.save(user_id, "s1", "extract", state(1), max_checkpoints=5)
    await checkpoints.save(user_id, "s1", "route", state(2), max_checkpoints=5)
    latest = await checkpoints.latest(user_id, "s1")
    assert latest is not None
    assert (latest.step, latest.state) == ("route", state(2))
    by_step = await checkpoints.latest(user_id, "s1", "extract")
    assert by_step is not None
    assert by_step.state == state(1)
    assert await checkpoints.latest(user_id, "other-session") is None


async def test_each_session_keeps_only_its_newest_checkpoints(checkpoints: CheckpointStore, user_id: UUID) -> None:
    for i in range(12):
        await checkpoints.save(user_id, "s1", "step", state(i), max_checkpoints=4)
    await checkpoints.save(user_id, "s2", "step", state(99), max_checkpoints=4)
    kept = await checkpoints.list_checkpoints(user_id, "s1")
    assert [c.state["question"] for c in kept] == [f"presupuesto {i}" for i in (11, 10, 9, 8)]
    assert len(await checkpoints.list_checkpoints(user_id, "s2")) == 1  # another session is not pruned


async def test_concurrent_saves_stay_bounded(checkpoints: CheckpointStore, user_id: UUID) -> None:
    await asyncio.gather(*(checkpoints.save(user_id, "s1", "step", state(i), max_checkpoints=3) for i in range(16)))
    assert len(await checkpoints.list_checkpoints(user_id, "s1")) == 3  # saves of a session are serialised
    await checkpoints.save(user_id, "s1", "step", state(100), max_checkpoints=3)
    kept = await checkpoints.list_checkpoints(user_id, "s1")
    assert len(kept) == 3
    assert kept[0].state == state(100)


async def test_another_user_sees_and_deletes_nothing(checkpoints: CheckpointStore, user_id: UUID) -> None:
    await checkpoints.save(user_id, "s1", "route", state(1), max_checkpoints=5)
    intruder = uuid4()
    assert await checkpoints.latest(intruder, "s1") is None
    assert await checkpoints.list_checkpoints(intruder, "s1") == []
    assert await checkpoints.delete_session(intruder, "s1") == 0
    assert len(await checkpoints.list_checkpoints(user_id, "s1")) == 1
    assert await checkpoints.delete_session(user_id, "s1") == 1
    assert await checkpoints.latest(user_id, "s1") is None


async def test_bad_snapshots_are_refused_and_keep_what_is_stored(checkpoints: CheckpointStore, user_id: UUID) -> None:
    await checkpoints.save(user_id, "s1", "route", state(1), max_checkpoints=5)
    with pytest.raises(InvalidMemoryInputError, match="limited to"):
        await checkpoints.save(user_id, "s1", "route", {"transcript": "x" * 70_000}, max_checkpoints=5)
    with pytest.raises(InvalidMemoryInputError, match="1 to 200"):
        await checkpoints.save(user_id, "", "route", state(2), max_checkpoints=5)
    with pytest.raises(InvalidMemoryInputError, match="at least 1"):
        await checkpoints.save(user_id, "s1", "route", state(2), max_checkpoints=0)
    assert [c.state for c in await checkpoints.list_checkpoints(user_id, "s1")] == [state(1)]
