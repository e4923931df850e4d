"""The Redis session store's sweep (`expire`) ends while another worker keeps writing, removes only the idle
sessions (never one touched meanwhile) and clears their keys and index entries."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from uuid import uuid4

import pytest
import redis

from memory_plugin.models import Message
from memory_plugin.session.redis_store import RedisSessionStore

TTL = 60.0
IDLE = 2_000


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def msg(text: str) -> Message:
    return Message(role="user", content=text)


def test_the_sweep_ends_while_another_worker_writes(redis_url: str, raw: redis.Redis) -> None:
    prefix = f"test-{uuid4().hex}"
    now = [1_000.0]  # one clock for both workers, moved by the test

    def clock() -> float:
        return now[0]

    sweeper = RedisSessionStore.connect(redis_url, prefix=prefix, ttl_seconds=TTL, clock=clock)
    writer = RedisSessionStore.connect(redis_url, prefix=prefix, ttl_seconds=TTL, clock=clock)
    user = uuid4()
    with raw.pipeline(transaction=False) as pipe:  # 2,000 idle sessions, as the store indexes them
        for i in range(IDLE):
            owner = "" if i % 2 else str(user)
            pipe.zadd(f"{prefix}:sessions", {f"{owner}/idle-{i}": 1_000.0})
            pipe.hset(f"{prefix}:session:{owner or '-'}:idle-{i}:meta", mapping={"owner": owner, "last": "1000"})
            pipe.sadd(f"{prefix}:owners:idle-{i}", owner)
        pipe.execute()
    now[0] += TTL / 2
    writer.add_message("kept", msg("written half a TTL later"), user_id=user)
    now[0] += TTL / 2 + 1  # the 2,000 are idle now, "kept" is not

    stop = threading.Event()
    written: list[str] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            while not stop.is_set():
                session = f"live-{len(written)}"
                writer.add_message(session, msg("sigo aquí"), user_id=user if len(written) % 2 else None)
                written.append(session)
        except BaseException as exc:  # collected: an assertion in a thread would be lost
            errors.append(exc)

    result: list[int] = []
    thread = threading.Thread(target=write)
    thread.start()
    try:
        while len(written) < 20:  # the writer is under way before the sweep starts
            time.sleep(0.01)
        sweep = threading.Thread(target=lambda: result.append(sweeper.expire()))
        sweep.start()
        sweep.join(timeout=60)
        finished = not sweep.is_alive()
    finally:
        stop.set()
        thread.join()
    sweep.join()
    try:
        assert errors == []
        assert finished, "the sweep did not end while another worker wrote"
        assert result == [IDLE]
        assert len(written) > 20
        assert len(sweeper) == len(written) + 1  # every live session and "kept" remain
        assert [m.content for m in sweeper.snapshot("kept", user_id=user).messages] == ["written half a TTL later"]
        assert not raw.keys(f"{prefix}:session:*:idle-*")
        assert not raw.keys(f"{prefix}:owners:idle-*")
        assert not raw.zrangebyscore(f"{prefix}:user:{user}:sessions", "-inf", 1_000.0)
    finally:
        sweeper.close()
        writer.close()
