"""The Supabase project files work: `config.toml`, `seed.sql`, the production login role and the admin path.

`supabase db reset` = migrations then seed.sql; here both run on a fresh database of the embedded server.
The application role of supabase/roles/memory_plugin_app.sql is created and used for real.
"""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
import pytest_asyncio
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import SecretStr

from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate
from memory_plugin.database.admin import USER_TABLES_SQL, MemoryAdmin
from memory_plugin.errors import StoreError
from memory_plugin.outage import ResilientStore
from memory_plugin.store import PostgresStore
from workflows.cli import DEMO_USER_ID

SUPABASE = Path(__file__).resolve().parents[1] / "supabase"
AdminConn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def fresh_db(admin_conn: AdminConn, database_url: str) -> Iterator[str]:
    """A new, empty database on the session's embedded server (a `supabase db reset` target)."""
    name = f"reset_{uuid4().hex[:12]}"
    admin_conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    yield make_conninfo(database_url, dbname=name)
    admin_conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


def test_config_toml_seeds_from_the_shipped_seed_file() -> None:
    config = tomllib.loads((SUPABASE / "config.toml").read_text())
    assert config["db"]["seed"]["enabled"] is True
    for path in config["db"]["seed"]["sql_paths"]:
        assert (SUPABASE / path).is_file()
    assert "public" in config["api"]["schemas"]
    assert sorted(p.name for p in (SUPABASE / "migrations").glob("*.sql"))  # the CLI's migrations directory


async def test_db_reset_applies_migrations_then_seed_and_the_plugin_reinforces_seeded_facts(fresh_db: str) -> None:
    async with await MemoryAdmin.connect(fresh_db) as admin:
        assert await admin.migrate()
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute((SUPABASE / "seed.sql").read_text())
        before = conn.execute(
            "select kind, count(*) from public.user_memory where user_id = %s group by kind order by kind",
            (DEMO_USER_ID,),
        ).fetchall()
    assert dict(before) == {"fact": 4, "pattern": 1, "preference": 3, "project": 1}

    settings = MemorySettings(database_url=SecretStr(fresh_db), auto_migrate=False)
    async with MemoryManager.open(settings) as memory:
        again = MemorizedFact(
            content="Requiere certificación ISO 9001 en todas las piezas",
            category="requirement",
            confidence=0.9,
            source="explicit",
        )
        await memory.update_memory(MemoryUpdate(user_id=DEMO_USER_ID, new_facts=[again]))
        facts = (await memory.get_memory_context("s", DEMO_USER_ID)).long_term.facts
    assert len(facts) == 4  # reinforced, not duplicated
    assert [f.relevance_count for f in facts if f.content == again.content] == [1]


@pytest.fixture(scope="module")
def app_role(database_url: str) -> str:
    """The production role, created from the shipped SQL (psql's :app_password variable filled in)."""
    script = (SUPABASE / "roles" / "memory_plugin_app.sql").read_text().replace(":app_password", "'test-secret'")
    with psycopg.connect(database_url, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_roles where rolname = 'memory_plugin_app'").fetchone()
        if not exists:
            conn.execute(script)
        attributes = conn.execute(
            "select rolsuper, rolbypassrls, rolinherit, rolcanlogin from pg_roles where rolname = 'memory_plugin_app'"
        ).fetchone()
    assert attributes == (False, False, False, True)
    params = conninfo_to_dict(database_url)
    params.update(user="memory_plugin_app", password="test-secret")
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


@pytest_asyncio.fixture(loop_scope="session")
async def app_memory(app_role: str) -> AsyncIterator[MemoryManager]:
    settings = MemorySettings(database_url=SecretStr(app_role), auto_migrate=False, pool_max_size=2)
    async with MemoryManager.open(settings) as memory:
        yield memory


def _fact(text: str) -> MemorizedFact:
    return MemorizedFact(content=text, category="preference", confidence=0.9, source="explicit")


async def test_the_application_role_works_for_each_user_and_only_for_them(
    app_memory: MemoryManager, admin_conn: AdminConn
) -> None:
    alice, bob = uuid4(), uuid4()
    await app_memory.update_memory(MemoryUpdate(user_id=alice, new_facts=[_fact("Alice prefiere titanio")]))
    await app_memory.update_memory(MemoryUpdate(user_id=bob, new_facts=[_fact("Bob prefiere acero")]))

    alice_ctx = await app_memory.get_memory_context("s-a", alice)
    assert [f.content for f in alice_ctx.long_term.facts] == ["Alice prefiere titanio"]
    owners = admin_conn.execute(
        "select user_id from public.user_memory where user_id = any(%s) order by content", ([alice, bob],)
    ).fetchall()
    assert owners == [(alice,), (bob,)]


async def test_the_application_role_alone_can_read_nothing(app_memory: MemoryManager) -> None:
    """Without the per-user prelude the login role has no privileges at all (noinherit)."""
    store = app_memory.store
    if isinstance(store, ResilientStore):  # the manager's default wrapper around the PostgresStore
        store = store.primary
    assert isinstance(store, PostgresStore)
    with pytest.raises(StoreError, match="permission denied"):
        await store._run(None, "select count(*) from public.user_memory", ())
    with pytest.raises(StoreError, match="permission denied"):
        await store._run(None, "set role service_role", ())
    assert await store.ping()


@pytest.mark.parametrize(
    "statement",
    [
        "create table public.evil (id int)",
        "alter table public.user_memory disable row level security",
        "drop policy user_memory_select_own on public.user_memory",
        "set role service_role",
        "select * from supabase_migrations.schema_migrations",
    ],
)
def test_the_application_role_cannot_change_the_schema_or_escalate(app_role: str, statement: str) -> None:
    with psycopg.connect(app_role, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)


async def test_erasing_a_user_is_an_admin_operation_that_removes_only_them(
    pg_memory: MemoryManager, database_url: str
) -> None:
    alice, bob = uuid4(), uuid4()
    await pg_memory.update_memory(MemoryUpdate(user_id=alice, new_facts=[_fact("Alice prefiere titanio")]))
    await pg_memory.update_memory(MemoryUpdate(user_id=bob, new_facts=[_fact("Bob prefiere acero")]))
    async with await MemoryAdmin.connect(database_url) as admin:
        # her fact, its search row (memory_search_docs), the record of the write (memory_applied_writes), her
        # row count (memory_search_counts), her usage count (memory_usage) and write-rate bucket
        # (memory_write_buckets)
        assert await admin.erase_user(alice) == 6
        assert await admin.erase_user(alice) == 0
    with psycopg.connect(database_url) as conn:
        for schema, table in conn.execute(USER_TABLES_SQL).fetchall():
            left = conn.execute(f'select count(*) from "{schema}"."{table}" where user_id = %s', (alice,)).fetchone()
            assert left == (0,), f"{schema}.{table} keeps rows of an erased user"
    assert await pg_memory.list_memory(alice) == []
    assert [r.content for r in await pg_memory.list_memory(bob)] == ["Bob prefiere acero"]


async def test_the_manager_migrates_through_the_admin_url_and_runs_as_the_app_role(
    app_role: str, fresh_db: str, database_url: str
) -> None:
    """The least-privileged role cannot create tables; with `admin_database_url` set, auto-migration uses it."""
    dbname = conninfo_to_dict(fresh_db)["dbname"]
    app_url = make_conninfo(app_role, dbname=dbname)
    with psycopg.connect(fresh_db, autocommit=True) as conn:  # the role may connect to the new database
        conn.execute(sql.SQL("grant connect on database {} to memory_plugin_app").format(sql.Identifier(dbname)))
    settings = MemorySettings(
        database_url=SecretStr(app_url), admin_database_url=SecretStr(fresh_db), resilient_store=False
    )
    user = uuid4()
    async with MemoryManager.open(settings) as memory:
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[_fact("Prefiere latón CW614N")]))
        ctx = await memory.get_memory_context("s", user)
    assert [f.content for f in ctx.long_term.facts] == ["Prefiere latón CW614N"]
    with psycopg.connect(fresh_db) as conn:
        owner = conn.execute("select tableowner from pg_tables where tablename = 'user_memory'").fetchone()
    assert owner is not None
    assert owner[0] != "memory_plugin_app"


async def test_the_embedded_default_runs_the_plugins_queries_as_the_application_role(data_dir: Path) -> None:
    """No URL set: the server's superuser migrates, the store connects as `memory_plugin_app`, which cannot
    get the superuser back, and the manager still works for each user."""
    settings = MemorySettings(data_dir=data_dir, resilient_store=False)  # the session's server, already running
    user = uuid4()
    async with MemoryManager.open(settings) as memory:
        store = memory.store
        assert isinstance(store, PostgresStore)
        async with store.pool.connection() as conn:
            who = await (await conn.execute("select current_user, session_user")).fetchall()
            await conn.execute("reset role")
            after_reset = await (await conn.execute("select current_user, usesuper from pg_user"
                                                    " where usename = current_user")).fetchall()  # fmt: skip
        assert [tuple(r.values()) for r in who] == [("memory_plugin_app", "memory_plugin_app")]
        assert [tuple(r.values()) for r in after_reset] == [("memory_plugin_app", False)]
        with pytest.raises(StoreError, match="permission denied"):
            await store._run(None, "set role postgres", ())
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[_fact("Prefiere latón naval")]))
        assert [f.content for f in (await memory.get_memory_context("s", user)).long_term.facts] == [
            "Prefiere latón naval"
        ]
        # `memory-plugin db-url` and administrative work keep the superuser's URL.
        assert memory.database_url is not None
        assert conninfo_to_dict(memory.database_url)["user"] == "postgres"
