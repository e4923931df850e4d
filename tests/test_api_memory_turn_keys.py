"""Memory turn finishes' idempotency keys in Postgres (`memory_plugin/api/turn_key_store.py`): two API workers on
one database (two apps, each with its own in-process keys, over the same manager so the session shows what was
recorded) record a retried finish once, whichever worker the retry reaches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID, uuid4

import httpx
import pytest
import pytest_asyncio
from pydantic import BaseModel

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.api.app import ApiServices
from memory_plugin.api.errors import ApiError
from memory_plugin.api.turn_key_store import PostgresTurnKeys
from memory_plugin.chats.idempotency import AppendKey
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.errors import IdempotencyKeyReusedError
from tests.test_api import auth
from tests.test_api_web import Pool, _client, _services, pool  # noqa: F401 (the fixture)

FINISH = {
    "session_id": "two-workers",
    "prompt": "Recuerda que prefiero bridas de latón",
    "answer": "Anotado.",
    "inline": True,
}


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def manager(database_url: str, data_dir: Path) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(MemorySettings(database_url=database_url, data_dir=data_dir)) as memory:
        yield memory


def _worker(pool: Pool, manager: MemoryManager) -> httpx.AsyncClient:  # noqa: F811
    """One API worker: its own app (so its own in-process keys) on the shared database."""
    services = _services(pool)
    return _client(
        ApiServices(**{**vars(services), "manager": manager, "consent": manager.memory_switch, "pool": pool})
    )


async def _keys(pool: Pool, user: UUID) -> list[tuple[str, str]]:  # noqa: F811
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "select key, state from memory_private.memory_turn_keys where user_id = %s order by key", (user,)
        )
        return [(row["key"], row["state"]) for row in await cursor.fetchall()]


async def test_a_retry_on_another_worker_records_the_exchange_once(pool: Pool, manager: MemoryManager) -> None:  # noqa: F811
    user, key = uuid4(), str(uuid4())
    headers = {**auth(user), "Idempotency-Key": key}
    async with _worker(pool, manager) as first, _worker(pool, manager) as second:
        done = await first.post("/api/memory/turns", json=FINISH, headers=headers)
        retried = await second.post("/api/memory/turns", json=FINISH, headers=headers)
        assert done.status_code == retried.status_code == 200, (done.text, retried.text)
        assert retried.json() == done.json()  # the first attempt's answer
        assert any("latón" in fact["content"] for fact in done.json()["stored"]), done.json()
        async with pool.connection() as conn:  # the kept answer names the facts by id, never by their text
            kept = await (
                await conn.execute(
                    "select outcome::text as o from memory_private.memory_turn_keys where user_id = %s", (user,)
                )
            ).fetchone()
        assert kept is not None
        assert "bridas" not in kept["o"]
        assert done.json()["stored"][0]["id"] in kept["o"]
        short = await manager.get_short_term(FINISH["session_id"], user_id=user)
        assert [m.content for m in short.messages] == [FINISH["prompt"], FINISH["answer"]]
        assert await _keys(pool, user) == [(key, "done")]

        reused = await second.post("/api/memory/turns", json={**FINISH, "answer": "Otra"}, headers=headers)
        assert reused.status_code == 422
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
        # Another user's same key is their own: their exchange is recorded in their session.
        other = uuid4()
        theirs = await second.post("/api/memory/turns", json=FINISH, headers={**auth(other), "Idempotency-Key": key})
        assert theirs.status_code == 200
        assert len((await manager.get_short_term(FINISH["session_id"], user_id=other)).messages) == 2
    assert len((await manager.get_short_term(FINISH["session_id"], user_id=user)).messages) == 2


class Out(BaseModel):
    n: int


async def test_a_running_claim_answers_409_on_another_worker_then_its_answer(pool: Pool) -> None:  # noqa: F811
    one, two = PostgresTurnKeys(pool, Out), PostgresTurnKeys(pool, Out)
    user, key, started, release = uuid4(), AppendKey("k", "h"), asyncio.Event(), asyncio.Event()

    async def slow() -> Out:
        started.set()  # the key is claimed before the work runs
        await release.wait()
        return Out(n=1)

    running = asyncio.create_task(one.once(user, key, slow, keep=lambda _: True))
    await started.wait()
    assert await _keys(pool, user) == [("k", "running")]
    with pytest.raises(ApiError) as busy:
        await two.once(user, key, lambda: slow(), keep=lambda _: True)
    assert (busy.value.status, busy.value.code) == (409, "turn_in_progress")
    assert busy.value.headers == {"Retry-After": "2"}
    release.set()
    assert await running == Out(n=1)
    assert await two.once(user, key, lambda: asyncio.sleep(0, Out(n=2)), keep=lambda _: True) == Out(n=1)
    with pytest.raises(IdempotencyKeyReusedError):
        await two.once(user, AppendKey("k", "other"), lambda: asyncio.sleep(0, Out(n=3)), keep=lambda _: True)


async def test_a_failed_or_unrecorded_attempt_forgets_its_key_so_another_worker_runs_it(pool: Pool) -> None:  # noqa: F811
    user, key = uuid4(), AppendKey("k", "h")

    async def fails() -> Out:
        raise RuntimeError("the session store went away")

    with pytest.raises(RuntimeError):
        await PostgresTurnKeys(pool, Out).once(user, key, fails, keep=lambda _: True)
    assert await _keys(pool, user) == []
    unrecorded = await PostgresTurnKeys(pool, Out).once(
        user, key, lambda: asyncio.sleep(0, Out(n=0)), keep=lambda o: o.n > 0
    )
    assert unrecorded == Out(n=0)
    assert await _keys(pool, user) == []  # `keep` refused it: forgotten too
    ran = await PostgresTurnKeys(pool, Out).once(user, key, lambda: asyncio.sleep(0, Out(n=5)), keep=lambda _: True)
    assert ran == Out(n=5)
    assert await _keys(pool, user) == [("k", "done")]


async def test_a_dead_workers_claim_is_taken_over_after_its_lease_and_its_late_answer_changes_nothing(
    pool: Pool,  # noqa: F811
) -> None:
    user, key = uuid4(), AppendKey("k", "h")
    async with pool.connection() as conn:  # a worker that claimed the key and died: its claim is never renewed
        await conn.execute(
            "insert into memory_private.memory_turn_keys (user_id, key, request_hash, claim_id, claimed_at)"
            " values (%s, 'k', 'h', %s, now() - interval '1 minute')",
            (user, uuid4()),
        )
        dead = await (
            await conn.execute("select claim_id from memory_private.memory_turn_keys where user_id = %s", (user,))
        ).fetchone()
    keys = PostgresTurnKeys(pool, Out, lease_seconds=30)
    assert await keys.once(user, key, lambda: asyncio.sleep(0, Out(n=7)), keep=lambda _: True) == Out(n=7)
    assert dead is not None
    await keys._settle((user, "k", dead["claim_id"]), None)  # the dead worker's late "forget": not its claim now
    assert await _keys(pool, user) == [("k", "done")]


async def test_old_keys_are_pruned_and_an_erase_deletes_the_users_keys(pool: Pool, database_url: str) -> None:  # noqa: F811
    user = uuid4()
    keys = PostgresTurnKeys(pool, Out)
    await keys.once(user, AppendKey("old", "h"), lambda: asyncio.sleep(0, Out(n=1)), keep=lambda _: True)
    async with pool.connection() as conn:
        await conn.execute(
            "update memory_private.memory_turn_keys set created_at = now() - interval '25 hours' where user_id = %s",
            (user,),
        )
    await keys.once(user, AppendKey("new", "h"), lambda: asyncio.sleep(0, Out(n=2)), keep=lambda _: True)
    assert await _keys(pool, user) == [("new", "done")]  # the day-old key went with the user's next claim
    async with await MemoryAdmin.connect(database_url) as admin:
        await admin.erase_user(user)
    assert await _keys(pool, user) == []


async def test_a_running_claim_is_renewed_so_a_long_finish_is_not_taken_over(pool: Pool) -> None:  # noqa: F811
    # A 1.5 s lease renewed every 0.5 s: two seconds into a three-second finish, another worker still gets 409.
    one, two = PostgresTurnKeys(pool, Out, lease_seconds=1.5), PostgresTurnKeys(pool, Out, lease_seconds=1.5)
    user, key = uuid4(), AppendKey("k", "h")
    running = asyncio.create_task(one.once(user, key, lambda: asyncio.sleep(3, Out(n=1)), keep=lambda _: True))
    await asyncio.sleep(2)
    with pytest.raises(ApiError) as busy:
        await two.once(user, key, lambda: asyncio.sleep(0, Out(n=2)), keep=lambda _: True)
    assert busy.value.status == 409
    assert await running == Out(n=1)
