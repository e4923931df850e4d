"""A timeout is not an outage: a statement the database cancels for its `statement_timeout` (or refuses for its
size) raises a typed error to the caller and is never journaled; a journaled write that meets such a limit on
replay is set aside with its reason, reported, and does not block the user's later writes, across restarts.

The timeouts here are real: the session's embedded PostgreSQL, a pool whose sessions have a 1 s
`statement_timeout`, and a trigger that sleeps 3 s when a row's content starts with "lento:" (any other write
is as fast as usual).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import PoolTimeout
from typer.testing import CliRunner

from memory_plugin import (
    MemorizedFact,
    MemoryManager,
    MemorySettings,
    MemoryUpdate,
    Note,
    PostgresStore,
    ResilientStore,
    StatementLimitError,
    StoreError,
    StoreUnavailableError,
)
from memory_plugin.cli import app
from memory_plugin.database.classify import store_error
from memory_plugin.outage import WriteJournal
from memory_plugin.outage.journal import database_identity
from memory_plugin.quality.rules import WriteRules
from memory_plugin.rows import MemoryItem
from memory_plugin.write.items import items_from_update

AdminConn = psycopg.Connection[tuple[Any, ...]]
TIMEOUT_MS = 1000
SLOW = "lento:"

SLOW_TRIGGER_SQL = f"""
create schema if not exists test_slow;
grant usage on schema test_slow to public;
create or replace function test_slow.sleep_on_insert() returns trigger language plpgsql as $$
begin
    perform pg_sleep(3);
    return new;
end $$;
grant execute on function test_slow.sleep_on_insert() to public;
drop trigger if exists test_slow_insert on public.user_memory;
create trigger test_slow_insert before insert on public.user_memory
    for each row when (new.content like '{SLOW}%') execute function test_slow.sleep_on_insert();
"""


def fact(content: str) -> MemorizedFact:
    return MemorizedFact(content=content, category="preference", confidence=0.8, source="explicit")


def items(content: str) -> list[MemoryItem]:
    return items_from_update([fact(content)], None, None, [], None)


def contents(admin_conn: AdminConn, user: UUID) -> set[str]:
    found = admin_conn.execute("select content from public.user_memory where user_id = %s", (user,)).fetchall()
    return {r[0] for r in found}


@pytest.fixture
def slow_inserts(admin_conn: AdminConn) -> Iterator[None]:
    """Inserting a row whose content starts with "lento:" takes 3 s (any other insert is unaffected)."""
    admin_conn.execute(SLOW_TRIGGER_SQL)
    yield
    admin_conn.execute("drop trigger if exists test_slow_insert on public.user_memory; drop schema test_slow cascade")


@pytest.fixture
def timed_url(database_url: str, slow_inserts: None) -> str:
    """The session's database, for sessions that cancel any statement after 1 s."""
    return make_conninfo(database_url, options=f"-c statement_timeout={TIMEOUT_MS}")


async def timed_store(url: str) -> PostgresStore:
    """A new pool on `url` (the `ResilientStore` given it closes it, as at a process's exit)."""
    return await PostgresStore.connect(url, max_size=2)


def journal_for(database_url: str, data_dir: Path) -> WriteJournal:
    """The journal `memory-plugin journal` reads for this database and data directory."""
    return WriteJournal.for_database(data_dir, database_identity(database_url))


def test_only_an_unreachable_database_is_an_outage() -> None:
    errors = psycopg.errors
    unreachable = [
        psycopg.OperationalError("connection refused"),  # client side: no SQLSTATE
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.CannotConnectNow("the database system is shutting down"),
        errors.ConnectionFailure("server closed the connection unexpectedly"),
        errors.DeadlockDetected("deadlock detected"),  # rolled back: the same statement succeeds when replayed
    ]
    for exc in unreachable:
        assert type(store_error(exc, "writing")) is StoreUnavailableError, exc
    assert type(store_error(PoolTimeout("no connection in 5 s"), "writing")) is StoreUnavailableError

    timeout = store_error(errors.QueryCanceled("canceling statement due to statement timeout"), "writing memory")
    assert isinstance(timeout, StatementLimitError)
    assert timeout.limit == "statement_timeout"
    assert "statement_timeout" in str(timeout)
    assert "fewer items" in str(timeout)
    limits = {
        errors.QueryCanceled("canceling statement due to user request"): "query_canceled",
        errors.LockNotAvailable("canceling statement due to lock timeout"): "lock_timeout",
        errors.OutOfMemory("out of memory"): "out_of_memory",
        errors.StatementTooComplex("stack depth limit exceeded"): "program_limit_exceeded",
    }
    for exc, limit in limits.items():
        error = store_error(exc, "writing")
        assert isinstance(error, StatementLimitError), exc
        assert error.limit == limit
    invalid = store_error(errors.CheckViolation("violates check constraint"), "writing")
    assert type(invalid) is StoreError


async def test_a_write_over_the_statement_timeout_raises_and_is_never_journaled(
    timed_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    user = uuid4()
    journal = WriteJournal(tmp_path / "journal" / "writes.jsonl")
    store = ResilientStore(await timed_store(timed_url), journal, background=False)
    async with MemoryManager.open(MemorySettings(data_dir=tmp_path), store=store) as memory:
        with pytest.raises(StatementLimitError) as raised:
            await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact(f"{SLOW} prefiere latón")]))
        assert raised.value.limit == "statement_timeout"
        status = await memory.backend_status()
        # Not acknowledged, not journaled, not an outage: the database answered.
        assert (status.backend, status.postgres_reachable, status.journal_length) == ("postgres", True, 0)
        assert (status.journaled_writes, status.connection_errors) == (0, 0)
        # The user's next write goes straight to the database.
        stored = await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact("Prefiere titanio")]))
        assert [f.content for f in stored] == ["Prefiere titanio"]
        assert store.journaled_writes == 0
    assert contents(admin_conn, user) == {"Prefiere titanio"}


@pytest.mark.slow
async def test_a_batch_of_notes_over_the_statement_timeout_is_refused_not_acknowledged(
    timed_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    user = uuid4()
    store = ResilientStore(await timed_store(timed_url), journal_for(timed_url, tmp_path), background=False)
    notes = [Note(content=f"Nota {i} sobre bridas") for i in range(300)] + [Note(content=f"{SLOW} la última")]
    async with MemoryManager.open(MemorySettings(data_dir=tmp_path), store=store) as memory:
        with pytest.raises(StatementLimitError, match="statement_timeout"):
            await memory.remember_many(user, notes)
        status = await memory.backend_status()
        assert (status.journal_length, status.journaled_writes, status.backend) == (0, 0, "postgres")
    # Whatever part was applied (one statement today: nothing; chunked, the chunks before), the note over the
    # limit is not stored, and the caller was told instead of getting an acknowledgement.
    assert f"{SLOW} la última" not in contents(admin_conn, user)


async def test_a_journaled_write_over_the_timeout_is_set_aside_at_replay_and_blocks_nothing(
    timed_url: str, database_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    user = uuid4()
    journal = journal_for(database_url, tmp_path)

    async def unreachable() -> PostgresStore:
        raise StoreUnavailableError("Postgres is unreachable: connection refused (test)")

    # A first run during an outage: both writes are acknowledged from the journal.
    first = ResilientStore(None, journal, connect=unreachable, background=False)
    await first.start()
    await first.upsert(user, items(f"{SLOW} una nota que ya no cabe en el límite"), WriteRules())
    await first.upsert(user, items("Prefiere latón CW614N"), WriteRules())
    await first.close()
    (slow, _good) = journal.entries()

    # The next start reaches a database that cancels the first entry at its statement_timeout.
    second = ResilientStore(await timed_store(timed_url), journal, background=False)
    await second.start()
    assert contents(admin_conn, user) == {"Prefiere latón CW614N"}  # the entry behind it was not blocked
    status = await second.status()
    assert (status.backend, status.journal_length, status.set_aside_writes) == ("postgres", 0, 1)
    assert (status.rejected_writes, status.replay_failures, status.connection_errors) == (1, 1, 0)
    ((rejected, reason),) = journal.rejected()
    assert rejected.write_id == slow.write_id
    assert "statement_timeout" in reason
    # The user's next write goes straight to the database.
    await second.upsert(user, items("Prefiere titanio"), WriteRules())
    assert second.journaled_writes == 0
    assert contents(admin_conn, user) == {"Prefiere latón CW614N", "Prefiere titanio"}
    await second.close()

    # Another restart does not try it again: it waits for an operator, who sees it and why.
    third = ResilientStore(await timed_store(timed_url), journal, background=False)
    await third.start()
    status = await third.status()
    assert (status.backend, status.journal_length, status.set_aside_writes, status.replay_failures) == (
        "postgres",
        0,
        1,
        0,
    )
    await third.close()
    env = {"COLUMNS": "250", "MEMORY_DATABASE_URL": database_url, "MEMORY_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, ["journal"], env=env)
    assert result.exit_code == 0, result.output
    assert "0 write(s) waiting" in result.output
    assert str(slow.write_id) in result.output
    assert "statement_timeout" in result.output


async def test_an_acknowledged_write_over_the_timeout_is_applied_in_parts_and_only_its_slow_item_set_aside(
    timed_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    user = uuid4()
    journal = WriteJournal(tmp_path / "journal" / "writes.jsonl")
    facts = ["Prefiere latón", "Usa tornillos M8", "Pide anodizado", f"{SLOW} plazo de 3 semanas"]
    whole = journal.append(user, items_from_update([fact(f) for f in facts], None, None, [], None), WriteRules())
    later = journal.append(user, items("Prefiere titanio"), WriteRules())
    store = ResilientStore(await timed_store(timed_url), journal, background=False)
    await store.start()
    status = await store.status()
    await store.close()
    # Every item the database can take is applied (halves, then quarters); the entry behind it is not blocked.
    assert contents(admin_conn, user) == {"Prefiere latón", "Usa tornillos M8", "Pide anodizado", "Prefiere titanio"}
    assert (status.backend, status.journal_length, status.set_aside_writes) == ("postgres", 0, 1)
    ((rejected, reason),) = journal.rejected()
    assert [i.content for i in rejected.items] == [f"{SLOW} plazo de 3 semanas"]
    assert rejected.split_from == whole.write_id  # the operator sees which acknowledged write it came from
    assert "statement_timeout" in reason
    assert later.write_id not in {e.write_id for e, _ in journal.rejected()}


def test_a_split_is_durable_and_keeps_the_provisional_ids(tmp_path: Path) -> None:
    journal = WriteJournal(tmp_path / "journal" / "writes.jsonl")
    user = uuid4()
    entry = journal.append(
        user, items_from_update([fact(f"Hecho {i}") for i in range(5)], None, None, [], None), WriteRules()
    )
    after = journal.append(user, items("Otro"), WriteRules())
    first, second = entry.halves()
    journal.split(entry, (first, second))
    reread = WriteJournal(journal.path).entries()  # as the next process reads it
    assert [e.write_id for e in reread] == [first.write_id, second.write_id, after.write_id]
    assert [len(e.items) for e in reread] == [2, 3, 1]
    # A forget by the id the acknowledgement returned still finds the item in its part.
    ids = {entry.record_id(i) for i in entry.items}
    assert {e.record_id(i) for e in reread[:2] for i in e.items} == ids
    # Halves of a half keep the whole write's ids, and derived write ids are stable.
    assert {e.record_id(i) for e in second.halves() for i in e.items} == {second.record_id(i) for i in second.items}
    assert entry.halves()[0].write_id == first.write_id


async def test_a_user_over_the_write_rate_waits_in_the_journal_and_holds_back_no_one_else(
    database_url: str, tmp_path: Path, admin_conn: AdminConn
) -> None:
    slow_user, other = uuid4(), uuid4()
    for name, value in (("write_burst", 1), ("write_rate_per_second", 0.001)):
        admin_conn.execute(
            "insert into memory_private.memory_limits (name, user_id, value) values (%s, %s, %s)",
            (name, slow_user, value),
        )
    journal = WriteJournal(tmp_path / "journal" / "writes.jsonl")
    journal.append(slow_user, items("Prefiere latón"), WriteRules())
    waiting = journal.append(slow_user, items("Prefiere titanio"), WriteRules())
    journal.append(other, items("Usa tornillos M8"), WriteRules())
    store = ResilientStore(await PostgresStore.connect(database_url, max_size=2), journal, background=False)
    try:
        await store.start()
        # The second write of the user is over the rate: it waits (acknowledged, not refused); the other user's
        # write behind it is applied.
        assert contents(admin_conn, slow_user) == {"Prefiere latón"}
        assert contents(admin_conn, other) == {"Usa tornillos M8"}
        assert [e.write_id for e in journal.entries()] == [waiting.write_id]
        assert journal.rejected() == []
        for _ in range(3):  # however often it is retried meanwhile, it is never set aside
            await store.replay()
        assert (await store.status()).set_aside_writes == 0
        admin_conn.execute("delete from memory_private.memory_limits where user_id = %s", (slow_user,))
        await store.replay()
        assert contents(admin_conn, slow_user) == {"Prefiere latón", "Prefiere titanio"}
        assert journal.entries() == []
    finally:
        await store.close()
