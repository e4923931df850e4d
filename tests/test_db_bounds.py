"""Bounds the database enforces itself (supabase/schemas/15_memory_bounds.sql, 90_memory_bounds.sql): each one
written past directly as `authenticated` with the user's JWT claims (what PostgREST does for a signed-in user's
request) and refused, with the SQLSTATE the plugin maps to `MemoryLimitError`. Limits are lowered per user
(`memory_limits` rows naming the test's user), so other tests keep the defaults."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from memory_plugin.database.calls import postgres_errors
from memory_plugin.errors import MemoryLimitError, StoreError, StoreLimitError
from memory_plugin.models import MemorizedFact
from memory_plugin.write.items import items_from_update
from tests.postgrest_transport import supabase_store

Conn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def conn(database_url: str) -> Iterator[Conn]:
    with psycopg.connect(database_url, autocommit=True) as c:
        yield c


@contextmanager
def as_user(conn: Conn, user: UUID) -> Iterator[Conn]:
    """One committed transaction as `authenticated` with `user`'s claims, as PostgREST runs a request."""
    with conn.transaction():
        conn.execute("select set_config('role', 'authenticated', true)")
        claims = json.dumps({"sub": str(user), "role": "authenticated"})
        conn.execute("select set_config('request.jwt.claims', %s, true)", (claims,))
        yield conn


def refused(conn: Conn, user: UUID, statement: str, params: Any = None) -> psycopg.Error:
    """The error `statement` raises run as `user` (it must raise)."""
    with pytest.raises(psycopg.Error) as caught, as_user(conn, user):
        conn.execute(statement, params)
    return caught.value


def limit(admin_conn: Conn, user: UUID, name: str, value: float) -> None:
    admin_conn.execute(
        "insert into memory_private.memory_limits (name, user_id, value) values (%s, %s, %s)", (name, user, value)
    )


def count(admin_conn: Conn, table: str, user: UUID) -> int:
    row = admin_conn.execute(f"select count(*) from {table} where user_id = %s", (user,)).fetchone()
    assert row is not None
    return int(row[0])


def fact_rows(user: UUID, n: int, start: int = 0, **extra: Any) -> str:
    """`n` direct inserts' values for user_memory as a JSON array (for jsonb_populate_recordset)."""
    return json.dumps([
        {"user_id": str(user), "kind": "fact", "category": "fact", "content": f"fact {i}", "content_hash": f"h{i}",
         **extra}
        for i in range(start, start + n)
    ])  # fmt: skip


INSERT_FACTS = (
    "insert into public.user_memory (user_id, kind, category, content, content_hash, metadata)"
    " select user_id, kind, category, content, content_hash, coalesce(metadata, '{}')"
    " from jsonb_populate_recordset(null::public.user_memory, %s::jsonb)"
)


def items_json(content: str) -> str:
    """memory_upsert_items' argument for one fact, as the plugin builds it."""
    fact = MemorizedFact(content=content, category="preference", confidence=0.9, source="explicit")
    return json.dumps([i.as_json() for i in items_from_update([fact], None, None, [], None)])


def item_hash() -> str:
    """The content hash of "Prefiere el titanio" as the plugin computes it."""
    return str(json.loads(items_json("Prefiere el titanio"))[0]["content_hash"])


def as_plugin_error(exc: psycopg.Error) -> Exception:
    """What the plugin raises for `exc` (database/calls.postgres_errors)."""
    with pytest.raises(StoreError) as caught, postgres_errors("the test"):
        raise exc
    return caught.value


def test_facts_per_user_is_refused_past_the_limit_in_one_statement_and_across_statements(
    conn: Conn, admin_conn: Conn
) -> None:
    user = uuid4()
    limit(admin_conn, user, "facts_per_user", 5)
    error = refused(conn, user, INSERT_FACTS, (fact_rows(user, 6),))
    assert error.sqlstate == "PT413"
    assert count(admin_conn, "public.user_memory", user) == 0  # the whole statement refused
    with as_user(conn, user):
        conn.execute(INSERT_FACTS, (fact_rows(user, 5),))
    assert refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, start=5),)).sqlstate == "PT413"
    # Through the write function too; a repeat (reinforcement) adds no row and is let through.
    upsert = "select * from public.memory_upsert_items(%s, %s::jsonb)"
    assert refused(conn, user, upsert, (user, items_json("Prefiere el latón"))).sqlstate == "PT413"
    with as_user(conn, user):
        conn.execute("update public.user_memory set content_hash = %s where content_hash = 'h0'", (item_hash(),))
        conn.execute(upsert, (user, items_json("Prefiere el titanio")))
    assert count(admin_conn, "public.user_memory", user) == 5
    # Deleting makes room again.
    with as_user(conn, user):
        conn.execute("delete from public.user_memory where content_hash = 'h1'")
        conn.execute(INSERT_FACTS, (fact_rows(user, 1, start=9),))
    error = refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, start=10),))
    plugin_error = as_plugin_error(error)
    assert isinstance(plugin_error, StoreLimitError)
    assert isinstance(plugin_error, MemoryLimitError)
    assert "facts_per_user" in str(plugin_error)


def test_a_user_cannot_reset_their_own_count_or_bucket(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "facts_per_user", 3)
    with as_user(conn, user):
        conn.execute(INSERT_FACTS, (fact_rows(user, 3),))
        assert conn.execute("select counted, n from memory_private.memory_usage").fetchall() == [("facts_per_user", 3)]
        for table in ("memory_usage", "memory_write_buckets", "memory_limits"):
            assert conn.execute(f"delete from memory_private.{table}").rowcount == 0
        assert conn.execute("update memory_private.memory_usage set n = 0").rowcount == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege), as_user(conn, user):
        conn.execute(
            "insert into memory_private.memory_limits (name, user_id, value) values ('facts_per_user', %s, 1e9)",
            (user,),
        )
    assert refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, start=3),)).sqlstate == "PT413"


def test_the_service_path_is_counted_but_never_refused(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "facts_per_user", 2)
    admin_conn.execute(INSERT_FACTS, (fact_rows(user, 4),))  # superuser: an import, maintenance
    row = admin_conn.execute(
        "select n from memory_private.memory_usage where user_id = %s and counted = 'facts_per_user'", (user,)
    ).fetchone()
    assert row == (4,)
    assert refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, start=4),)).sqlstate == "PT413"


def test_the_write_rate_is_a_token_bucket_per_user(conn: Conn, admin_conn: Conn) -> None:
    user, other = uuid4(), uuid4()
    limit(admin_conn, user, "write_burst", 10)
    limit(admin_conn, user, "write_rate_per_second", 0.01)
    with as_user(conn, user):
        conn.execute(INSERT_FACTS, (fact_rows(user, 10),))
    error = refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, start=10),))
    assert error.sqlstate == "PT429"
    plugin_error = as_plugin_error(error)
    assert isinstance(plugin_error, MemoryLimitError)
    assert plugin_error.retry_after is not None
    assert 90 < plugin_error.retry_after <= 100
    # Changing rows is writing too; another user's bucket is their own.
    assert refused(conn, user, "update public.user_memory set importance = 5").sqlstate == "PT429"
    with as_user(conn, other):
        conn.execute(INSERT_FACTS, (fact_rows(other, 10),))
    # More than the burst at once can never pass: no retry_after.
    limit(admin_conn, other, "write_burst", 3)
    too_many = refused(conn, other, "update public.user_memory set importance = 4")
    retry_after = as_plugin_error(too_many)
    assert isinstance(retry_after, MemoryLimitError)
    assert retry_after.retry_after is None


def test_a_users_own_limit_wins_over_the_default_also_when_higher(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "write_burst", 20000)  # the default is 10,000
    limit(admin_conn, user, "write_rate_per_second", 0.01)
    limit(admin_conn, user, "facts_per_user", 2)
    with as_user(conn, user):
        conn.execute(INSERT_FACTS, (fact_rows(user, 1),))
    admin_conn.execute("update memory_private.memory_write_buckets set tokens = 0 where user_id = %s", (user,))
    error = refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, start=1),))
    assert error.sqlstate == "PT429"
    assert "20000 at once" in str(error)
    admin_conn.execute("update memory_private.memory_write_buckets set tokens = 100 where user_id = %s", (user,))
    with as_user(conn, user):
        conn.execute(INSERT_FACTS, (fact_rows(user, 1, start=1),))
    error = refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, start=2),))
    assert error.sqlstate == "PT413"
    assert "the limit is 2" in str(error)
    assert count(admin_conn, "public.user_memory", user) == 2


def test_metadata_and_content_sizes_are_checked(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    big = {"blob": "x" * 70_000}
    error = refused(conn, user, INSERT_FACTS, (fact_rows(user, 1, metadata=big),))
    assert error.sqlstate == "23514"
    assert error.diag.constraint_name == "user_memory_metadata_bound"
    assert isinstance(as_plugin_error(error), MemoryLimitError)
    too_long = json.dumps([{**json.loads(fact_rows(user, 1))[0], "content": "x" * 20_001}])
    error = refused(conn, user, INSERT_FACTS, (too_long,))
    assert error.sqlstate == "23514"
    assert count(admin_conn, "public.user_memory", user) == 0


def test_only_three_summary_versions_are_kept_and_summaries_per_user_are_counted(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    insert = (
        "insert into public.memory_summaries (user_id, scope, version, content, kind)"
        " select %s, %s, v, 'resumen ' || v, 'model' from generate_series(1, %s) v"
    )
    with as_user(conn, user):
        conn.execute(insert, (user, "user", 500))
    versions = admin_conn.execute(
        "select version from public.memory_summaries where user_id = %s order by version", (user,)
    ).fetchall()
    assert versions == [(498,), (499,), (500,)]
    limit(admin_conn, user, "summaries_per_user", 6)
    with as_user(conn, user):
        conn.execute(insert, (user, "session:a", 3))
    assert refused(conn, user, insert, (user, "session:b", 1)).sqlstate == "PT413"


def test_slots_keep_eight_entries_per_field_and_a_bounded_document(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    insert = "insert into public.memory_slots (user_id, slots) values (%s, %s::jsonb)"
    nine = {"goal": [{"text": f"goal {i}"} for i in range(9)]}
    error = refused(conn, user, insert, (user, json.dumps(nine)))
    assert error.diag.constraint_name == "memory_slots_document_bound"
    huge = {f"field{i}": [{"text": "x"}] for i in range(50_000)}
    assert refused(conn, user, insert, (user, json.dumps(huge))).sqlstate == "23514"
    with as_user(conn, user):
        conn.execute(insert, (user, json.dumps({"goal": [{"text": f"goal {i}"} for i in range(8)]})))
    update = "update public.memory_slots set slots = slots || %s::jsonb"
    assert refused(conn, user, update, (json.dumps(nine),)).sqlstate == "23514"


def test_chats_per_user_and_history_size(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "chats_per_user", 3)
    insert = "insert into public.chats (user_id, title) select %s, 'chat ' || i from generate_series(1, %s) i"
    assert refused(conn, user, insert, (user, 4)).sqlstate == "PT413"
    with as_user(conn, user):
        conn.execute(insert, (user, 3))
    assert refused(conn, user, insert, (user, 1)).sqlstate == "PT413"
    history = (
        "update public.chats set full_history = (select jsonb_agg(jsonb_build_object('kind', 'request', 'parts',"
        " '[]'::jsonb)) from generate_series(1, 10001)) where title = 'chat 1'"
    )
    assert refused(conn, user, history, None).diag.constraint_name == "chats_history_bound"
    too_big = "update public.chats set full_history = jsonb_build_array(repeat(md5(random()::text), 600000))"
    assert refused(conn, user, too_big, None).diag.constraint_name == "chats_history_bound"
    with as_user(conn, user):  # deleting frees room
        conn.execute("delete from public.chats where title = 'chat 1'")
        conn.execute(insert, (user, 1))


def test_conversations_and_entries_per_user(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "conversations_per_user", 2)
    limit(admin_conn, user, "conversation_entries_per_user", 100)
    entries = (
        "insert into public.conversation_entries (user_id, id, message)"
        ' select %s, \'e\' || i, \'{"kind": "request", "parts": []}\' from generate_series(%s::int, %s::int) i'
    )
    with as_user(conn, user):
        conn.execute(entries, (user, 1, 100))
    assert refused(conn, user, entries, (user, 101, 101)).sqlstate == "PT413"
    conversations = (
        "insert into public.conversations (user_id, conversation_id, revision)"
        " select %s, 'c' || i, 'r' from generate_series(%s::int, %s::int) i"
    )
    with as_user(conn, user):
        conn.execute(conversations, (user, 1, 2))
    assert refused(conn, user, conversations, (user, 3, 3)).sqlstate == "PT413"
    assert count(admin_conn, "public.conversations", user) == 2


def test_checkpoints_per_user_across_sessions(conn: Conn, admin_conn: Conn) -> None:
    user = uuid4()
    limit(admin_conn, user, "checkpoints_per_user", 5)
    insert = (
        "insert into memory_private.workflow_checkpoints (user_id, session_id, step, state)"
        " values (%s, %s, 'route', '{}')"
    )
    for session in range(7):
        with as_user(conn, user):
            conn.execute(insert, (user, f"s{session}"))
    # Past the limit the user's oldest checkpoints go (a new session's run is never refused).
    sessions = admin_conn.execute(
        "select session_id from memory_private.workflow_checkpoints where user_id = %s order by id", (user,)
    ).fetchall()
    assert sessions == [("s2",), ("s3",), ("s4",), ("s5",), ("s6",)]
    usage = admin_conn.execute(
        "select n from memory_private.memory_usage where user_id = %s and counted = 'checkpoints_per_user'", (user,)
    ).fetchone()
    assert usage == (5,)


def test_a_counted_row_cannot_change_owner(admin_conn: Conn) -> None:
    user = uuid4()
    admin_conn.execute("insert into public.chats (user_id, title) values (%s, 'mine')", (user,))
    with pytest.raises(psycopg.errors.CheckViolation):
        admin_conn.execute("update public.chats set user_id = %s where user_id = %s", (uuid4(), user))


@pytest.mark.asyncio(loop_scope="session")
async def test_a_postgrest_client_gets_the_refusal_as_a_limit_error(database_url: str, admin_conn: Conn) -> None:
    """`SupabaseStore` (through the PostgREST emulator): HTTP 413 with PT413 becomes `StoreLimitError`."""
    user = uuid4()
    limit(admin_conn, user, "facts_per_user", 1)
    store = supabase_store(database_url)
    try:
        items = [
            i
            for text in ("Prefiere el latón", "Prefiere el titanio")
            for i in items_from_update(
                [MemorizedFact(content=text, category="preference", confidence=0.9, source="explicit")],
                None, None, [], None,
            )
        ]  # fmt: skip
        with pytest.raises(StoreLimitError, match="facts_per_user"):
            await store.upsert(user, items)
    finally:
        await store.close()
    assert count(admin_conn, "public.user_memory", user) == 0


def test_search_rows_are_bounded_by_the_users_own_facts(conn: Conn, admin_conn: Conn) -> None:
    """A search row is one per fact of the user: a REST client inserting search rows that name no fact of theirs
    is refused (as the dropped foreign key did), so the search table cannot grow past the fact limit."""
    user = uuid4()
    with as_user(conn, user):
        conn.execute(INSERT_FACTS, (fact_rows(user, 2),))
    assert count(admin_conn, "public.memory_search_docs", user) == 2  # the facts' own rows, by the trigger
    for i in range(3):
        error = refused(
            conn,
            user,
            "insert into public.memory_search_docs (memory_id, user_id, content) values (%s, %s, %s)",
            (uuid4(), user, f"padding {i}"),
        )
        assert isinstance(error, psycopg.errors.ForeignKeyViolation)
    error = refused(
        conn, user, "update public.memory_search_docs set memory_id = %s where user_id = %s", (uuid4(), user)
    )
    assert isinstance(error, psycopg.errors.ForeignKeyViolation)
    assert count(admin_conn, "public.memory_search_docs", user) == 2
