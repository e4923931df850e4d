"""The background queue is fair and holds no raw secrets at rest: a user's own limit of waiting jobs, the
queue's limit never refusing another user's first job, job payloads and errors redacted, dead jobs expiring."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
import pytest_asyncio

from memory_plugin.background import InProcessJobQueue, JobQueue, PostgresJobQueue
from memory_plugin.models import Message
from tests.test_cross_tenant import acting_as

pytestmark = pytest.mark.asyncio(loop_scope="session")

CARD = "4111 1111 1111 1111"


def said(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


async def waiting_jobs(queue: JobQueue) -> int:
    status = await queue.status()
    return status.pending + status.retrying


@pytest_asyncio.fixture(loop_scope="session", params=["postgres", "in-process"])
async def make_queue(
    request: pytest.FixtureRequest, database_url: str, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> AsyncIterator[Any]:
    """A factory of queues of the parametrized kind, closed after the test; the jobs it queued in the shared
    database are deleted (a later test's worker would run them, or make the deferred ones due)."""
    opened: list[JobQueue] = []
    first = admin_conn.execute("select coalesce(max(id), 0) from public.memory_jobs").fetchone()

    async def make(max_pending: int, per_user: int) -> JobQueue:
        queue: JobQueue
        if request.param == "in-process":
            queue = InProcessJobQueue(max_pending=max_pending, max_messages=20, max_pending_per_user=per_user)
        else:
            queue = await PostgresJobQueue.connect(
                database_url, max_pending=max_pending, max_messages=20, max_pending_per_user=per_user
            )
            # The database is shared with other tests: the queue's limit counts from what is already waiting.
            queue.max_pending = max_pending + await waiting_jobs(queue)  # type: ignore[attr-defined]
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        await queue.close()
    admin_conn.execute("delete from public.memory_jobs where id > %s", (first[0] if first else 0,))


async def test_a_user_at_their_limit_is_deferred_and_other_users_are_not(make_queue: Any) -> None:
    queue = await make_queue(1000, 3)
    greedy, other = uuid4(), uuid4()
    outcomes = [(await queue.enqueue(greedy, f"s{i}", said("Hola"), "explicit")) for i in range(4)]
    assert [o for _, o in outcomes] == ["queued", "queued", "queued", "deferred"]
    # The deferred session's later messages join its deferred job (their order holds).
    assert await queue.enqueue(greedy, "s3", said("más"), "explicit") == (outcomes[3][0], "deferred")
    assert (await queue.enqueue(greedy, "s0", said("más"), "explicit"))[1] == "coalesced"  # its own session still
    assert (await queue.enqueue(other, "s0", said("Hola"), "explicit"))[1] == "queued"
    status = await queue.status()
    assert status.deferred >= 1
    # The backlog is bounded too: 10 × the per-user limit of deferred sessions, then refused.
    later = [(await queue.enqueue(greedy, f"t{i}", said("Hola"), "explicit"))[1] for i in range(30)]
    assert later == ["deferred"] * 29 + ["full"]


async def test_a_full_queue_never_refuses_a_user_without_a_waiting_job(make_queue: Any) -> None:
    queue = await make_queue(3, 100)
    greedy, second, third = uuid4(), uuid4(), uuid4()
    outcomes = [(await queue.enqueue(greedy, f"s{i}", said("Hola"), "explicit"))[1] for i in range(4)]
    assert outcomes == ["queued", "queued", "queued", "deferred"]
    assert (await queue.enqueue(second, "s", said("Hola"), "explicit"))[1] == "queued"
    assert (await queue.enqueue(third, "s", said("Hola"), "explicit"))[1] == "queued"
    # Past the queue's limit, a user already holding a job waits like everyone else.
    assert (await queue.enqueue(second, "t", said("Hola"), "explicit"))[1] == "deferred"


async def test_deferred_jobs_become_due_when_the_users_waiting_jobs_fall_below_the_limit(
    database_url: str, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    queue = await PostgresJobQueue.connect(database_url, max_pending=100_000, max_messages=20, max_pending_per_user=3)
    queue.promote_every_seconds = 0.0
    user = uuid4()
    try:
        ids = [(await queue.enqueue(user, f"s{i}", said(f"Hola {i}"), "explicit"))[0] for i in range(5)]

        def states() -> list[str]:
            found = admin_conn.execute("select state from public.memory_jobs where user_id = %s order by id", (user,))
            return [r[0] for r in found.fetchall()]

        assert states() == ["pending"] * 3 + ["deferred"] * 2
        await queue.claim("w", 0, 60)  # a worker's poll: the user is still at the limit
        assert states() == ["pending"] * 3 + ["deferred"] * 2
        admin_conn.execute("delete from public.memory_jobs where id = %s", (ids[0],))  # one job done
        await queue.claim("w", 0, 60)
        assert states() == ["pending"] * 3 + ["deferred"]  # the oldest deferred session first, one slot, one job
        admin_conn.execute("delete from public.memory_jobs where user_id = %s and state = 'pending'", (user,))
        await queue.claim("w", 0, 60)
        assert states() == ["pending"]
    finally:
        admin_conn.execute("delete from public.memory_jobs where user_id = %s", (user,))
        await queue.close()


@pytest_asyncio.fixture(loop_scope="session")
async def pg_queue(
    database_url: str, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> AsyncIterator[PostgresJobQueue]:
    first = admin_conn.execute("select coalesce(max(id), 0) from public.memory_jobs").fetchone()
    queue = await PostgresJobQueue.connect(database_url, max_pending=100_000, max_messages=20)
    yield queue
    await queue.close()
    admin_conn.execute("delete from public.memory_jobs where id > %s", (first[0] if first else 0,))


def payload_of(admin_conn: psycopg.Connection[tuple[Any, ...]], user: UUID) -> str:
    row = admin_conn.execute(
        "select payload::text || coalesce(last_error, '') from public.memory_jobs where user_id = %s", (user,)
    ).fetchone()
    assert row is not None
    return str(row[0])


async def test_queued_and_dead_jobs_hold_no_raw_secrets(
    pg_queue: PostgresJobQueue, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    user = uuid4()
    text = f"Paga con la {CARD} y mi contraseña es Hunter2Secreta!"
    await pg_queue.enqueue(user, "s", said(text), "explicit")
    stored = payload_of(admin_conn, user)
    assert CARD not in stored
    assert "Hunter2Secreta" not in stored
    assert "[redacted payment_card]" in stored
    assert "Paga con la" in stored  # the rest is kept for extraction
    # Due first of all jobs (the database is shared with other tests, whose jobs this claim must leave alone).
    admin_conn.execute("update public.memory_jobs set run_after = '2000-01-01' where user_id = %s", (user,))
    claimed = await pg_queue.claim("w", 1, 60)
    assert [job.user_id for job in claimed] == [user]
    await pg_queue.fail(claimed[0], "w", f"model refused: {text}", delay_seconds=0, dead=True)
    dead = payload_of(admin_conn, user)
    assert CARD not in dead
    assert "Hunter2Secreta" not in dead


async def test_dead_jobs_expire_after_seven_days(
    pg_queue: PostgresJobQueue, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    old, recent = uuid4(), uuid4()
    for user in (old, recent):
        admin_conn.execute(
            "insert into public.memory_jobs (user_id, session_id, payload, state) values (%s, 's', '{}', 'dead')",
            (user,),
        )
    admin_conn.execute(
        "update public.memory_jobs set updated_at = now() - interval '8 days' where user_id = %s", (old,)
    )
    assert await pg_queue.claim("w", 0, 60) == []  # claims nothing, expires what is due
    left = admin_conn.execute(
        "select user_id from public.memory_jobs where user_id = any(%s)", ([old, recent],)
    ).fetchall()
    assert left == [(recent,)]


async def test_a_signed_in_user_cannot_write_their_own_backlog(
    database_url: str, admin_conn: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """The backlog's bound holds through PostgREST: a user's own jobs are readable and cancellable, never written
    (only the queue functions, as `memory_worker`, enqueue, defer or promote)."""
    user = uuid4()
    admin_conn.execute(
        "insert into public.memory_jobs (user_id, session_id, state, payload) values (%s, 's', 'deferred', '{}')",
        (user,),
    )
    with psycopg.connect(database_url) as conn:
        for statement, params in (
            ("insert into public.memory_jobs (user_id, session_id, state, payload) values (%s, 't', 'deferred', '{}')",
             (user,)),
            ("select memory_private.memory_jobs_promote(array[%s]::uuid[], 100, 100)", (user,)),
        ):  # fmt: skip
            with acting_as(conn, "authenticated", user), pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement, params)
        with acting_as(conn, "authenticated", user):
            assert (
                conn.execute("update public.memory_jobs set state = 'pending' where user_id = %s", (user,)).rowcount
                == 0
            )
            assert conn.execute("select state from public.memory_jobs where user_id = %s", (user,)).fetchall() == [
                ("deferred",)
            ]
    admin_conn.execute("delete from public.memory_jobs where user_id = %s", (user,))
