"""What only the Redis session backend does: native key expiry (no sweep, nothing left behind), the window trimmed
atomically under concurrent writers, and the manager on `MEMORY_SESSION_BACKEND=redis`. Its `SessionBackend`
contract runs with the other backends' (tests/test_session_store.py, tests/test_shared_sessions.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
import redis
from pydantic import SecretStr

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.errors import MemoryPluginError, StoreUnavailableError
from memory_plugin.models import Message
from memory_plugin.session.redis_store import RedisSessionStore


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def msg(text: str) -> Message:
    return Message(role="user", content=text)


def test_every_key_carries_the_ttl_and_activity_renews_it(redis_url: str, raw: redis.Redis) -> None:
    prefix = f"test-{uuid4().hex}"
    store = RedisSessionStore.connect(redis_url, prefix=prefix, ttl_seconds=600)
    try:
        user = uuid4()
        store.add_message("s1", msg("40 soportes"), user_id=user)
        keys = sorted(raw.scan_iter(f"{prefix}:*"))
        session_keys = [k for k in keys if ":session:" in k]
        assert len(session_keys) == 2  # the meta hash and the message list
        for key in (*session_keys, f"{prefix}:user:{user}:sessions", f"{prefix}:owners:s1"):
            assert 0 < raw.pttl(key) <= 600_000, key
        raw.pexpire(f"{prefix}:session:{user}:s1:meta", 5_000)
        store.snapshot("s1", user_id=user)  # a read is activity: the TTL is back to the full 600 s
        assert raw.pttl(f"{prefix}:session:{user}:s1:meta") > 5_000
    finally:
        store.close()


def test_an_idle_session_disappears_from_redis_by_itself(redis_url: str, raw: redis.Redis) -> None:
    prefix = f"test-{uuid4().hex}"
    store = RedisSessionStore.connect(redis_url, prefix=prefix, ttl_seconds=0.2)
    try:
        user = uuid4()
        store.add_message("s1", msg("hola"), user_id=user)
        store.update_entities("s1", {"materials": "latón"}, user_id=user)
        for _ in range(100):  # Redis expires the keys itself (checked every 100 ms): no sweep is called
            if not raw.exists(f"{prefix}:session:{user}:s1:meta", f"{prefix}:session:{user}:s1:messages"):
                break
            time.sleep(0.05)
        assert raw.exists(f"{prefix}:session:{user}:s1:meta", f"{prefix}:session:{user}:s1:messages") == 0
        assert store.snapshot("s1", user_id=user).messages == []
        store.add_message("s1", msg("de otro"), user_id=uuid4())  # the id is free again
    finally:
        store.close()


def test_concurrent_writers_keep_the_window_exact(redis_url: str) -> None:
    store = RedisSessionStore.connect(redis_url, prefix=f"test-{uuid4().hex}", max_messages=7)
    user = uuid4()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for i in range(40):
                store.add_message("shared", msg(f"{name}-{i}"), user_id=user)
        except BaseException as exc:  # collected: an assertion in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{t}",)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert store.messages_seen("shared", user_id=user) == 160
        window = [m.content for m in store.snapshot("shared", user_id=user).messages]
        assert len(window) == 7
        assert len(set(window)) == 7
        last = {f"w{t}-39" for t in range(4)}
        assert window[-1] in last  # the newest message is some writer's last
    finally:
        store.close()


async def test_two_managers_on_redis_share_a_session(redis_url: str, pg_settings: MemorySettings) -> None:
    settings = pg_settings.model_copy(update={"session_backend": "redis", "redis_url": SecretStr(redis_url)})
    user, sid = uuid4(), f"s-{uuid4().hex}"
    async with MemoryManager.open(settings) as first, MemoryManager.open(settings) as second:
        await first.add_message(sid, msg("Necesito 40 soportes anodizados"), user_id=user)
        short = await second.get_short_term(sid, user_id=user)
        assert [m.content for m in short.messages] == ["Necesito 40 soportes anodizados"]
        assert (await second.describe())["live_sessions"] >= 1


async def test_a_missing_or_unreachable_redis_is_a_clear_error(pg_settings: MemorySettings) -> None:
    with pytest.raises(MemoryPluginError, match="MEMORY_REDIS_URL"):
        async with MemoryManager.open(pg_settings.model_copy(update={"session_backend": "redis"})):
            pass
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreUnavailableError, match="Redis"):
        RedisSessionStore.connect(f"redis://127.0.0.1:{port}/0")
    for not_a_url in ("", "localhost:6379", "http://localhost:6379/0"):
        with pytest.raises(MemoryPluginError, match="not a Redis URL"):
            RedisSessionStore.connect(not_a_url)


def test_erase_also_forgets_the_users_sessions_in_redis(redis_url: str, database_url: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from memory_plugin.cli import app

    store = RedisSessionStore.connect(redis_url)  # the prefix the settings' store uses
    try:
        erased, kept = uuid4(), uuid4()
        store.add_message("erased-1", msg("40 soportes"), user_id=erased)
        store.add_message("erased-2", msg("en latón"), user_id=erased)
        store.add_message("kept-1", msg("20 bridas"), user_id=kept)
        env = {
            "MEMORY_DATABASE_URL": database_url,
            "MEMORY_DATA_DIR": str(tmp_path),
            "MEMORY_SESSION_BACKEND": "redis",
            "MEMORY_REDIS_URL": redis_url,
            "COLUMNS": "200",
        }
        done = CliRunner().invoke(app, ["erase", "--user", str(erased), "--yes"], env=env)
        assert done.exit_code == 0, done.output
        assert "2 Redis session(s)" in done.output
        assert store.snapshot("erased-1", user_id=erased).messages == []
        assert store.snapshot("erased-2", user_id=erased).messages == []
        assert [m.content for m in store.snapshot("kept-1", user_id=kept).messages] == ["20 bridas"]
    finally:
        store.close()
