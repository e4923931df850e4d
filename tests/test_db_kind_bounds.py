"""Count limits the database enforces on preferences, projects and patterns (user_memory rows other than facts)
and on the Postgres session store's sessions (supabase/schemas/92_memory_kind_bounds.sql): written past directly
as `authenticated` with the user's JWT claims (what PostgREST does), through the Python API, and by concurrent
writers; refused with PT413 / `MemoryLimitError`, the fact limit's refusal. Limits are lowered per user."""

from __future__ import annotations

import asyncio
import json
from uuid import UUID, uuid4

import pytest

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.errors import MemoryLimitError, StoreLimitError
from memory_plugin.models import MemoryUpdate, ProjectRecord, UserPreferences
from tests.test_db_bounds import INSERT_FACTS, Conn, as_plugin_error, as_user, conn, count, fact_rows, limit, refused

__all__ = ["conn"]  # the fixture, shared with test_db_bounds

INSERT_ROWS = (
    "insert into public.user_memory (user_id, kind, category, content, content_hash)"
    " select %s, %s, %s, %s::text || ' ' || i, %s::text || i from generate_series(%s::int, %s::int) i"
)
CATEGORY = {"preference": "preferred_materials", "project": "project", "pattern": "pattern"}


def rows(user: UUID, kind: str, n: int, start: int = 0) -> tuple[object, ...]:
    """INSERT_ROWS' parameters: `n` rows of `kind` for `user`."""
    return (user, kind, CATEGORY[kind], f"{kind} text", f"{kind}-", start, start + n - 1)


def kind_count(admin_conn: Conn, user: UUID, kind: str) -> int:
    row = admin_conn.execute(
        "select count(*) from public.user_memory where user_id = %s and kind = %s", (user, kind)
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("kind", ["preference", "project", "pattern"])
def test_each_kind_is_refused_past_its_limit_in_one_statement_and_across_statements(
    conn: Conn, admin_conn: Conn, kind: str
) -> None:
    user = uuid4()
    limit(admin_conn, user, f"{kind}s_per_user", 3)
    error = refused(conn, user, INSERT_ROWS, rows(user, kind, 4))
    assert error.sqlstate == "PT413"
    assert count(admin_conn, "public.user_memory", user) == 0  # the whole statement refused
    with as_user(conn, user):
        conn.execute(INSERT_ROWS, rows(user, kind, 3))
        conn.execute(INSERT_FACTS, (fact_rows(user, 5),))  # facts have their own limit
    error = refused(conn, user, INSERT_ROWS, rows(user, kind, 1, start=3))
    plugin_error = as_plugin_error(error)
    assert isinstance(plugin_error, StoreLimitError)
    assert isinstance(plugin_error, MemoryLimitError)
    assert f"{kind}s_per_user" in str(plugin_error)
    # Deleting makes room again; other kinds are counted apart.
    with as_user(conn, user):
        conn.execute("delete from public.user_memory where content_hash = %s", (f"{kind}-0",))
        conn.execute(INSERT_ROWS, rows(user, kind, 1, start=10))
        other = next(k for k in CATEGORY if k != kind)
        conn.execute(INSERT_ROWS, rows(user, other, 4))
    assert kind_count(admin_conn, user, kind) == 3


def test_changing_a_rows_kind_moves_it_between_the_counts(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "patterns_per_user", 1)
    with as_user(conn, user):
        conn.execute(INSERT_ROWS, rows(user, "pattern", 1))
        conn.execute(INSERT_ROWS, rows(user, "project", 1))
    turn_into_pattern = "update public.user_memory set kind = 'pattern', category = 'pattern' where kind = 'project'"
    assert refused(conn, user, turn_into_pattern).sqlstate == "PT413"
    with as_user(conn, user):
        conn.execute("update public.user_memory set kind = 'project', category = 'project' where kind = 'pattern'")
        conn.execute(
            "update public.user_memory set kind = 'pattern', category = 'pattern' where content_hash = 'pattern-0'"
        )
    usage = admin_conn.execute(
        "select counted, n from memory_private.memory_usage where user_id = %s and counted <> 'facts_per_user'"
        " order by counted",
        (user,),
    ).fetchall()
    assert usage == [("patterns_per_user", 1), ("projects_per_user", 1)]


def test_the_service_path_is_counted_but_never_refused(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "projects_per_user", 2)
    admin_conn.execute(INSERT_ROWS, rows(user, "project", 4))
    row = admin_conn.execute(
        "select n from memory_private.memory_usage where user_id = %s and counted = 'projects_per_user'", (user,)
    ).fetchone()
    assert row == (4,)
    assert refused(conn, user, INSERT_ROWS, rows(user, "project", 1, start=4)).sqlstate == "PT413"


@pytest.mark.asyncio(loop_scope="session")
async def test_the_python_api_is_refused_past_the_preference_limit_and_stores_nothing_of_that_write(
    pg_settings: MemorySettings, admin_conn: Conn
) -> None:
    user = uuid4()
    limit(admin_conn, user, "preferences_per_user", 2)
    settings = pg_settings.model_copy(update={"embedding_model": "none"})
    async with MemoryManager.open(settings) as memory:
        first = UserPreferences(preferred_materials=["aluminio 7075", "titanio"])
        await memory.update_memory(MemoryUpdate(user_id=user, preferences=first))
        more = UserPreferences(preferred_materials=["latón"], industry="aeroespacial")
        with pytest.raises(MemoryLimitError, match="preferences_per_user"):
            await memory.update_memory(MemoryUpdate(user_id=user, preferences=more))
    assert kind_count(admin_conn, user, "preference") == 2


@pytest.mark.asyncio(loop_scope="session")
async def test_twenty_concurrent_projects_against_a_limit_of_ten_store_exactly_ten(
    pg_settings: MemorySettings, admin_conn: Conn
) -> None:
    user = uuid4()
    limit(admin_conn, user, "projects_per_user", 10)
    settings = pg_settings.model_copy(update={"pool_max_size": 20, "embedding_model": "none"})
    async with MemoryManager.open(settings) as memory:

        async def write(i: int) -> int:
            project = ProjectRecord(description=f"Pedido {i}: 50 bridas de acero")
            try:
                await memory.update_memory(MemoryUpdate(user_id=user, project=project))
            except MemoryLimitError:
                return 0
            return 1

        stored = await asyncio.gather(*(write(i) for i in range(20)))
    assert kind_count(admin_conn, user, "project") == 10
    assert sorted(stored) == [0] * 10 + [1] * 10


INSERT_SESSIONS = (
    "insert into memory_private.memory_sessions (session_id, user_id, last_active)"
    " select 's-' || i, %s, 0 from generate_series(%s::int, %s::int) i"
)


def test_sessions_per_user_are_refused_past_the_limit_and_anonymous_ones_are_not_counted(
    conn: Conn, admin_conn: Conn
) -> None:
    user = uuid4()
    limit(admin_conn, user, "sessions_per_user", 3)
    assert refused(conn, user, INSERT_SESSIONS, (user, 0, 3)).sqlstate == "PT413"
    with as_user(conn, user):
        conn.execute(INSERT_SESSIONS, (user, 0, 2))
    error = refused(conn, user, INSERT_SESSIONS, (user, 3, 3))
    assert isinstance(as_plugin_error(error), MemoryLimitError)
    assert count(admin_conn, "memory_private.memory_sessions", user) == 3
    with as_user(conn, user):
        conn.execute("delete from memory_private.memory_sessions where session_id = 's-0'")
        conn.execute(INSERT_SESSIONS, (user, 3, 3))
    # Anonymous sessions (the store's, on the service path) are no user's.
    anonymous = f"anon-{uuid4()}"
    admin_conn.execute(
        "insert into memory_private.memory_sessions (session_id, user_id, last_active) values (%s, null, 0)",
        (anonymous,),
    )
    admin_conn.execute("delete from memory_private.memory_sessions where session_id = %s", (anonymous,))


def test_one_session_has_a_bounded_size(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    with as_user(conn, user):
        conn.execute(INSERT_SESSIONS, (user, 0, 0))
    huge = json.dumps([{"role": "user", "content": "x"}] * 10_001)
    for column in ("messages", "intents"):
        error = refused(conn, user, f"update memory_private.memory_sessions set {column} = %s::jsonb", (huge,))
        assert error.sqlstate == "23514"
        assert error.diag.constraint_name == "memory_sessions_state_bound"
        assert isinstance(as_plugin_error(error), MemoryLimitError)
    big = json.dumps({"material": ["x" * 1000 + str(i) for i in range(2000)]})
    error = refused(conn, user, "update memory_private.memory_sessions set entities = %s::jsonb", (big,))
    assert error.diag.constraint_name == "memory_sessions_state_bound"
