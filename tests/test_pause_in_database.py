"""The memory switch kept by the database: a paused user's writes are refused in the write's own statement
(SQLSTATE PT423), whoever sends them — the plugin or a PostgREST client with the user's token — for facts and
notes, slots, summaries and chats; reads, deletes and forgetting go on; the service path is not refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from memory_plugin import MemorizedFact, MemoryManager, MemoryUpdate
from memory_plugin.errors import MemoryPausedError, StorePausedError
from memory_plugin.write.items import items_from_update

AdminConn = psycopg.Connection[tuple[Any, ...]]
PAUSED = "PT423"


def fact(text: str) -> MemorizedFact:
    return MemorizedFact(content=text, category="preference", confidence=0.9, source="explicit")


def _items(text: str) -> str:
    return json.dumps([i.as_json() for i in items_from_update([fact(text)], None, None, [], None)])


def _pause(admin_conn: AdminConn, user: UUID, paused: bool = True) -> None:
    admin_conn.execute(
        "insert into memory_private.memory_consent (user_id, paused) values (%s, %s)"
        " on conflict (user_id) do update set paused = excluded.paused",
        (user, paused),
    )


@contextmanager
def as_user(database_url: str, user: UUID) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A transaction as `authenticated` with `user`'s JWT claims (what PostgREST does per request), rolled back."""
    with psycopg.connect(database_url) as conn:
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute(
            "select set_config('request.jwt.claims', %s, true)",
            (json.dumps({"sub": str(user), "role": "authenticated"}),),
        )
        try:
            yield conn
        finally:
            conn.rollback()


# Each write a PostgREST client could send about its own user.
WRITES = {
    "a fact, by insert": "insert into public.user_memory (user_id, kind, category, content, content_hash)"
    " values (%(u)s, 'fact', 'fact', 'Trabaja los lunes', 'h-' || gen_random_uuid())",
    "a fact, by memory_upsert_items": "select * from public.memory_upsert_items(%(u)s, %(items)s::jsonb)",
    "a reinforcement": "update public.user_memory set confidence = 1 where user_id = %(u)s",
    "the slots": "insert into public.memory_slots (user_id, slots) values (%(u)s, '{}')"
    " on conflict (user_id) do update set slots = excluded.slots",
    "a summary": "insert into public.memory_summaries (user_id, scope, version, content, kind)"
    " values (%(u)s, 'user', 7, 'Resumen', 'model')",
    "a chat": "insert into public.chats (user_id, title) values (%(u)s, 'Nuevo chat')",
    "an append to a chat": 'update public.chats set full_history = full_history || \'[{"kind": "request"}]\','
    " turn_count = turn_count + 1 where user_id = %(u)s",
}


@pytest.fixture
def paused_user(admin_conn: AdminConn) -> UUID:
    """A user with a fact, slots and a chat, then paused."""
    user = uuid4()
    admin_conn.execute("select public.memory_upsert_items(%s, %s::jsonb)", (user, _items("Prefiere aluminio 7075")))
    admin_conn.execute("insert into public.memory_slots (user_id, slots) values (%s, '{}')", (user,))
    admin_conn.execute("insert into public.chats (user_id, title) values (%s, 'Chat')", (user,))
    _pause(admin_conn, user)
    return user


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_paused_users_own_write_as_authenticated_is_refused(
    database_url: str, admin_conn: AdminConn, paused_user: UUID, write: str
) -> None:
    params = {"u": paused_user, "items": _items("Prefiere latón")}
    with as_user(database_url, paused_user) as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute(WRITES[write], params)
    assert refused.value.sqlstate == PAUSED
    assert "paused" in str(refused.value)
    # Resumed, the same write goes through (so the refusal above was the pause, not the write).
    _pause(admin_conn, paused_user, paused=False)
    with as_user(database_url, paused_user) as conn:
        conn.execute(WRITES[write], params)


def test_reads_deletes_and_forgetting_go_on_while_paused(database_url: str, paused_user: UUID) -> None:
    with as_user(database_url, paused_user) as conn:
        rows = conn.execute("select id, content from public.user_memory where user_id = %s", (paused_user,)).fetchall()
        assert [r[1] for r in rows] == ["Prefiere aluminio 7075"]
        assert conn.execute("select * from public.memory_context(%s)", (paused_user,)).fetchall()
        # Forgetting (a fact made invalid) retires a row: not a new write.
        conn.execute("update public.user_memory set invalid_at = now() where id = %s", (rows[0][0],))
        conn.execute("delete from public.chats where user_id = %s", (paused_user,))
        conn.execute("delete from public.user_memory where user_id = %s", (paused_user,))


def test_other_users_and_the_service_path_are_not_paused(
    database_url: str, admin_conn: AdminConn, paused_user: UUID
) -> None:
    other = uuid4()
    with as_user(database_url, other) as conn:
        for write in WRITES.values():
            conn.execute(write, {"u": other, "items": _items("Prefiere latón")})
    # The service path (import, maintenance): the owner, not `authenticated`.
    rows = admin_conn.execute(
        "select * from public.memory_upsert_items(%s, %s::jsonb)", (paused_user, _items("Prefiere cobre"))
    ).fetchall()
    assert len(rows) == 1


async def test_a_pause_applies_to_the_next_write_at_once_through_the_python_api(
    pg_memory: MemoryManager, admin_conn: AdminConn, user_id: UUID
) -> None:
    await pg_memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere aluminio 7075")]))
    _pause(admin_conn, user_id)  # set by another process: no cache in between
    with pytest.raises(StorePausedError, match="paused"):
        await pg_memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere latón")]))
    with pytest.raises(MemoryPausedError):
        await pg_memory.remember(user_id, "Trabaja los lunes")
    assert [r.content for r in await pg_memory.list_memory(user_id)] == ["Prefiere aluminio 7075"]
    assert pg_memory.store.pending_writes == 0  # type: ignore[attr-defined]
    await pg_memory.pause_memory(user_id, paused=False)
    await pg_memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=[fact("Prefiere latón")]))
    assert len(await pg_memory.list_memory(user_id)) == 2
