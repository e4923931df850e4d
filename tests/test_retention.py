"""Retention (`memory-plugin maintain`, `apply_retention`): raw conversation data past the policy goes, facts and
summaries stay, a second run removes nothing, and a run concurrent with writes removes nothing current."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
from typer.testing import CliRunner

from memory_plugin import MemoryManager
from memory_plugin.cli import app
from memory_plugin.retention import RetentionPolicy, apply_retention

OLD = datetime.now(UTC) - timedelta(days=800)
HISTORY = json.dumps([{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hola"}]}])


def add_rows(conn: psycopg.Connection[Any], user: UUID, at: datetime, tag: str) -> UUID:
    """One row of every kind retention looks at, written at `at`; returns the chat's id."""
    chat = uuid4()
    conn.execute(
        "insert into public.chats (id, user_id, title, full_history, assistant_history, summary_text, created_at,"
        " last_activity_at) values (%s, %s, %s, %s, %s, '', %s, %s)",
        (chat, user, f"chat {tag}", HISTORY, HISTORY, at, at),
    )
    conn.execute(
        "insert into public.conversation_entries (user_id, id, parent_id, message, created_at) values"
        " (%s, %s, null, '{}', %s), (%s, %s, %s, '{}', %s)",
        (user, f"{tag}-1", at, user, f"{tag}-2", f"{tag}-1", at),
    )
    conn.execute(
        "insert into public.conversations (user_id, conversation_id, head_id, revision, updated_at)"
        " values (%s, %s, %s, 'r1', %s)",
        (user, f"conv-{tag}", f"{tag}-2", at),
    )
    conn.execute(
        "insert into memory_private.memory_sessions (session_id, user_id, last_active) values (%s, %s, %s)",
        (f"session-{tag}-{user}", user, at.timestamp()),
    )
    conn.execute(
        "insert into memory_private.workflow_checkpoints (user_id, session_id, step, state, created_at)"
        " values (%s, 's', %s, '{}', %s)",
        (user, tag, at),
    )
    conn.execute(
        "insert into public.memory_jobs (user_id, session_id, payload, state, created_at, updated_at, run_after)"
        " values (%s, %s, '{}', 'dead', %s, %s, %s)",
        (user, f"s-{tag}", at, at, at),
    )
    conn.execute(
        "insert into memory_private.memory_applied_writes (user_id, write_id, item_count, applied_at)"
        " values (%s, %s, 1, %s)",
        (user, uuid4(), at),
    )
    conn.execute(
        "insert into memory_private.memory_turn_keys (user_id, key, request_hash, created_at) values (%s, %s, 'h', %s)",
        (user, tag, at),
    )
    conn.execute(
        "insert into public.memory_summaries (user_id, scope, version, content, kind, created_at)"
        " values (%s, %s, 1, 'resumen', 'model', %s)",
        (user, f"session:{tag}", at),
    )
    return chat


RAW_TABLES = (
    "public.chats",
    "public.conversations",
    "public.conversation_entries",
    "memory_private.memory_sessions",
    "memory_private.workflow_checkpoints",
    "public.memory_jobs",
    "memory_private.memory_applied_writes",
    "memory_private.memory_turn_keys",
)


def counts(conn: psycopg.Connection[Any], user: UUID) -> dict[str, int]:
    tables = [
        "public.conversations", "public.conversation_entries", "memory_private.memory_sessions",
        "memory_private.workflow_checkpoints", "public.memory_jobs", "memory_private.memory_applied_writes",
        "memory_private.memory_turn_keys", "public.memory_summaries", "public.user_memory",
    ]  # fmt: skip
    out = {}
    for table in tables:
        row = conn.execute(f"select count(*) from {table} where user_id = %s", (user,)).fetchone()
        out[table] = int(row[0]) if row else 0
    row = conn.execute(
        "select count(*) from public.chats where user_id = %s and full_history <> '[]'", (user,)
    ).fetchone()
    out["chats with history"] = int(row[0]) if row else 0
    return out


async def test_old_raw_data_goes_facts_and_summaries_stay_and_a_second_run_removes_nothing(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], database_url: str, user_id: UUID
) -> None:
    old_chat = add_rows(admin_conn, user_id, OLD, "old")
    add_rows(admin_conn, user_id, datetime.now(UTC), "new")
    # A current conversation whose first message is old: the message is kept with the conversation.
    admin_conn.execute(
        "insert into public.conversation_entries (user_id, id, parent_id, message, created_at)"
        " values (%s, 'root', null, '{}', %s)",
        (user_id, OLD),
    )
    admin_conn.execute(
        "update public.conversation_entries set parent_id = 'root' where user_id = %s and id = 'new-1'", (user_id,)
    )
    fact = await pg_memory.remember(user_id, "Prefiere aluminio 7075")
    admin_conn.execute("update public.user_memory set created_at = %s where id = %s", (OLD, fact.id))

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        first = await apply_retention(conn, RetentionPolicy())
        second = await apply_retention(conn, RetentionPolicy())
    assert first.removed["public.conversation_entries"] >= 2
    assert second.total == 0, second.describe()
    assert counts(admin_conn, user_id) == {
        "public.conversations": 1,
        "public.conversation_entries": 3,  # new-1, new-2 and the old root they descend from
        "memory_private.memory_sessions": 1,
        "memory_private.workflow_checkpoints": 1,
        "public.memory_jobs": 1,
        "memory_private.memory_applied_writes": 2,  # the new one and the one `remember` wrote
        "memory_private.memory_turn_keys": 1,  # the new one (24 hours, whatever the policy)
        "public.memory_summaries": 2,
        "public.user_memory": 1,
        "chats with history": 1,
    }
    title = admin_conn.execute("select title, turn_count from public.chats where id = %s", (old_chat,)).fetchone()
    assert title is not None
    assert title[0] == "chat old", "the chat itself stays, without its histories"


def test_maintain_reports_what_retention_removed_and_is_idempotent(
    admin_conn: psycopg.Connection[Any], database_url: str
) -> None:
    user = uuid4()
    add_rows(admin_conn, user, OLD, "old")
    runner = CliRunner()
    env = {"MEMORY_DATABASE_URL": database_url, "COLUMNS": "200"}
    first = runner.invoke(app, ["maintain"], env=env)
    assert first.exit_code == 0, first.output
    line = " ".join(first.output.split())
    for table in RAW_TABLES:
        assert re.search(rf"[1-9]\d* {re.escape(table)}", line), (table, line)
    again = runner.invoke(app, ["maintain"], env=env)
    assert "retention removed nothing" in again.output
    shorter = runner.invoke(app, ["maintain"], env={**env, "MEMORY_RETENTION_RAW_MONTHS": "0"})
    assert shorter.exit_code == 0, shorter.output


async def test_a_run_concurrent_with_writes_removes_nothing_current(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], database_url: str, user_id: UUID
) -> None:
    old_chat = add_rows(admin_conn, user_id, OLD, "old")
    async with await psycopg.AsyncConnection.connect(database_url) as writer:
        # A writer appends to the old chat and holds its row while retention runs: the chat is skipped, and
        # once the append commits it is current, so the next run keeps it.
        await writer.execute("select 1 from public.chats where id = %s for update", (old_chat,))
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            stop = asyncio.Event()

            async def retention_loop() -> int:
                runs = 0
                while not stop.is_set():
                    await apply_retention(conn, RetentionPolicy())
                    runs += 1
                return runs

            loop = asyncio.create_task(retention_loop())
            written = []
            for n in range(15):
                written.append(await pg_memory.remember(user_id, f"Nota actual número {n}"))
                # In a thread: a blocking insert on the event loop would wait for a lock the retention task
                # holds, and that task can only commit on the event loop (a hang, seen under load).
                await asyncio.to_thread(add_rows, admin_conn, user_id, datetime.now(UTC), f"now{n}")
                await asyncio.sleep(0.01)
            await writer.execute(
                "update public.chats set full_history = full_history || %s::jsonb, last_activity_at = now()"
                " where id = %s",
                (HISTORY, old_chat),
            )
            await writer.commit()
            stop.set()
            assert await loop >= 1
            await apply_retention(conn, RetentionPolicy())
    state = counts(admin_conn, user_id)
    assert state["public.conversations"] == 15
    assert state["public.conversation_entries"] == 30
    assert state["memory_private.memory_sessions"] == 15
    assert state["memory_private.workflow_checkpoints"] == 15
    assert state["public.memory_jobs"] == 15
    assert state["chats with history"] == 16, "every current chat and the old one appended to"
    assert len(await pg_memory.list_memory(user_id)) == len(written)
