"""Export and import of a user's memory (docs/export.md), on the real Postgres: the round trip gives the same
document, the document fits the JSON Schema in the repository, and bad files or a user already present are
refused with typed errors and nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import jsonschema_rs
import psycopg
import pytest

from bench.export import fill, measure_export
from memory_plugin import MemoryManager
from memory_plugin.database.admin import USER_TABLES_SQL, MemoryAdmin
from memory_plugin.errors import ExportFormatError, ExportVersionError, ImportConflictError
from memory_plugin.export import DERIVED_TABLES, SECTIONS, TRANSIENT_TABLES, export_chunks
from tests.export_helpers import fill_user

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "memory_plugin/export/schema/v1.json").read_text())


async def export_text(memory: MemoryManager, user: UUID) -> str:
    return "".join([chunk async for chunk in memory.export_user(user)])


def rows_of(admin_conn: psycopg.Connection[Any], user: UUID) -> dict[str, int]:
    """The user's rows per table (tables without any left out)."""
    counts = {}
    for schema, table in admin_conn.execute(USER_TABLES_SQL).fetchall():
        row = admin_conn.execute(f'select count(*) from "{schema}"."{table}" where user_id = %s', (user,)).fetchone()
        if row is not None and row[0]:
            counts[f"{schema}.{table}"] = int(row[0])
    return counts


async def erase(database_url: str, user: UUID) -> None:
    async with await MemoryAdmin.connect(database_url) as admin:
        await admin.erase_user(user)


async def test_export_erase_import_export_gives_the_same_document(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], database_url: str, user_id: UUID
) -> None:
    await fill_user(pg_memory, admin_conn, user_id)
    first = await export_text(pg_memory, user_id)
    document = json.loads(first)
    jsonschema_rs.validate(SCHEMA, document)
    assert all(document["sections"][name] for name in SECTIONS), "every section holds a row"
    facts = document["sections"]["memories"]
    assert any(f["superseded_by"] and f["invalid_at"] for f in facts), "the superseded version is exported"
    before = await pg_memory.search(user_id, "viernes cerramos")

    await erase(database_url, user_id)
    assert rows_of(admin_conn, user_id) == {}
    report = await pg_memory.import_user(first)
    assert report.rows["memories"] == len(facts)
    assert report.total == sum(len(v) for v in document["sections"].values())

    assert await export_text(pg_memory, user_id) == first
    after = await pg_memory.search(user_id, "viernes cerramos")
    assert before
    assert [h.memory.id for h in after][:1] == [h.memory.id for h in before][:1], "the search index is rebuilt"


async def test_new_rows_after_an_import_never_reuse_a_restored_id(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], database_url: str, user_id: UUID
) -> None:
    await fill_user(pg_memory, admin_conn, user_id)
    document = json.loads(await export_text(pg_memory, user_id))
    await erase(database_url, user_id)
    top = admin_conn.execute("select coalesce(max(id), 0) + 1000 from memory_private.workflow_checkpoints").fetchone()
    assert top is not None
    document["sections"]["checkpoints"][0]["id"] = top[0]  # as if exported from a database further along
    await pg_memory.import_user(document)
    new = admin_conn.execute(
        "insert into memory_private.workflow_checkpoints (user_id, session_id, step, state)"
        " values (%s, 's', 'x', '{}') returning id",
        (user_id,),
    ).fetchone()
    assert new is not None
    assert new[0] > top[0]


async def test_the_document_is_the_same_whatever_the_page_size(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], database_url: str, user_id: UUID
) -> None:
    await fill_user(pg_memory, admin_conn, user_id)
    for n in range(30):
        await pg_memory.remember(user_id, f"Nota número {n} sobre el pedido")
    whole = await export_text(pg_memory, user_id)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        paged = "".join([c async for c in export_chunks(conn, user_id, as_user=False, page_rows=7)])
        as_user = "".join([c async for c in export_chunks(conn, user_id, as_user=True, page_rows=3)])
    assert paged == whole == as_user
    assert len(json.loads(whole)["sections"]["memories"]) >= 30


async def test_an_export_holds_only_its_user(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], user_id: UUID
) -> None:
    other = uuid4()
    await fill_user(pg_memory, admin_conn, other)
    await pg_memory.remember(user_id, "Trabaja con latón")
    document = json.loads(await export_text(pg_memory, user_id))
    assert str(other) not in json.dumps(document)
    assert [m["content"] for m in document["sections"]["memories"]] == ["Trabaja con latón"]
    assert all(not rows for name, rows in document["sections"].items() if name not in ("memories", "applied_writes"))


async def test_importing_a_user_the_database_holds_is_refused_and_writes_nothing(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], user_id: UUID
) -> None:
    await fill_user(pg_memory, admin_conn, user_id)
    text = await export_text(pg_memory, user_id)
    held = rows_of(admin_conn, user_id)
    with pytest.raises(ImportConflictError, match="erase the user first"):
        await pg_memory.import_user(text)
    assert rows_of(admin_conn, user_id) == held
    assert await export_text(pg_memory, user_id) == text


async def test_a_row_id_held_by_another_user_is_a_conflict_and_writes_nothing(
    pg_memory: MemoryManager, admin_conn: psycopg.Connection[Any], user_id: UUID
) -> None:
    await fill_user(pg_memory, admin_conn, user_id)
    document = json.loads(await export_text(pg_memory, user_id))
    document["user_id"] = str(stranger := uuid4())  # the same fact ids, under another user
    with pytest.raises(ImportConflictError, match="already exists"):
        await pg_memory.import_user(document)
    assert rows_of(admin_conn, stranger) == {}


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda text: text[:-40], ExportFormatError, "not valid JSON"),
        (lambda text: text.replace('"version": 1', '"version": 2', 1), ExportVersionError, "version 2"),
        (
            lambda text: text.replace('"format": "memory-plugin.user-export"', '"format": "x"'),
            ExportFormatError,
            "not a memory export",
        ),
        (
            lambda text: text.replace('"content": "Trabaja', '"colour": "red", "content": "Trabaja'),
            ExportFormatError,
            "colour",
        ),
        # The last section's row breaks a check constraint: the earlier sections were inserted, and rolled back.
        (lambda text: text.replace('"item_count": 1', '"item_count": "many"'), ExportFormatError, "does not fit"),
        (lambda text: text.replace('"confidence": 0.9', '"confidence": 7'), ExportFormatError, "does not fit"),
    ],
    ids=["truncated", "foreign-version", "not-an-export", "unknown-field", "bad-type", "bad-value"],
)
async def test_a_malformed_or_foreign_file_is_a_typed_error_and_writes_nothing(
    pg_memory: MemoryManager,
    admin_conn: psycopg.Connection[Any],
    database_url: str,
    user_id: UUID,
    change: Any,
    error: type[Exception],
    message: str,
) -> None:
    await fill_user(pg_memory, admin_conn, user_id)
    await pg_memory.remember(user_id, "Trabaja con latón", category="fact")
    admin_conn.execute("update public.user_memory set confidence = 0.9 where user_id = %s", (user_id,))
    text = await export_text(pg_memory, user_id)
    await erase(database_url, user_id)
    broken = change(text)
    assert broken != text
    with pytest.raises(error, match=message):
        await pg_memory.import_user(broken)
    assert rows_of(admin_conn, user_id) == {}


def test_every_table_holding_user_rows_is_exported_or_rebuilt(admin_conn: psycopg.Connection[Any]) -> None:
    tables = {f"{s}.{t}" for s, t in admin_conn.execute(USER_TABLES_SQL).fetchall()}
    assert tables - set(SECTIONS.values()) - DERIVED_TABLES - TRANSIENT_TABLES == set(), (
        "a new table holds rows of users: add it to memory_plugin/export/format.py SECTIONS (and the JSON Schema)"
        " or to DERIVED_TABLES if triggers rebuild it, TRANSIENT_TABLES if it holds hours-long operational data"
    )
    assert set(SCHEMA["properties"]["sections"]["properties"]) == set(SECTIONS)


@pytest.mark.slow
async def test_a_user_with_50000_facts_and_1000_chats_exports_in_bounded_memory(database_url: str) -> None:
    user = uuid4()
    await fill(database_url, user, 50_000, 1_000)
    _, size, peak, _ = await measure_export(database_url, user)
    assert size > 80_000_000
    assert peak < 10_000_000, f"peak Python memory {peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB document"
    async with await MemoryAdmin.connect(database_url) as admin:
        await admin.erase_user(user)
