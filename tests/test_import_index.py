"""An import indexes its facts for search in one pass at the end (supabase/schemas/45_memory_bulk_load.sql): the
search rows, postings and counts it builds are the ones the per-fact triggers build, the database's counts
and limits hold, and a user cannot use the bulk-load switch to skip the per-fact index of their own writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from bench.export_import import main
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.export import export_from_url, import_into_url

Conn = psycopg.Connection[tuple[Any, ...]]

# Facts written one statement with increasing created_at, in three sessions (one fact without a session), two
# speakers: the per-fact triggers number them in this order, as the import does by (created_at, id).
FACTS_SQL = """
insert into public.user_memory (user_id, kind, category, content, content_hash, confidence, source, session_id,
                                metadata, created_at)
select %(user)s, 'fact', 'fact', 'Hecho ' || n || ': el ' || (array['lunes', 'martes', 'viernes'])[n %% 3 + 1]
       || ' pide piezas de aluminio 7075 y latón', md5(%(user)s::text || n), 0.8, 'inferred',
       case when n = 7 then null else 's-' || (n %% 3) end,
       case when n %% 2 = 0 then '{"speaker": "Ána"}' else '{}' end::jsonb,
       now() - interval '1 day' + n * interval '1 ms'
  from generate_series(1, %(facts)s) as n order by n
"""
INDEX_SQL: dict[str, str] = {
    "docs": "select memory_id, session_id, seq, prev_memory_id, content, speaker, search_tsv::text"
    " from public.memory_search_docs where user_id = %s order by seq",
    "terms": "select lexeme, memory_id, tf from memory_private.memory_search_terms where user_id = %s"
    " order by lexeme, memory_id",
    "counts": "select docs, last_seq, search_partition::text from memory_private.memory_search_counts"
    " where user_id = %s",
    "usage": "select counted, n from memory_private.memory_usage where user_id = %s order by counted",
}


def index_of(admin_conn: Conn, user: UUID) -> dict[str, list[tuple[Any, ...]]]:
    return {name: admin_conn.execute(query, (user,)).fetchall() for name, query in INDEX_SQL.items()}


async def export_text(url: str, user: UUID) -> str:
    return "".join([chunk async for chunk in export_from_url(url, user, as_user=False)])


async def test_an_import_builds_the_search_index_the_per_fact_triggers_build(
    database_url: str, admin_conn: Conn
) -> None:
    user = uuid4()
    admin_conn.execute(FACTS_SQL, {"user": user, "facts": 40})
    written = index_of(admin_conn, user)
    assert len(written["docs"]) == 40
    assert written["terms"]
    assert written["counts"] == [(40, 40, written["counts"][0][2])]
    assert sum(1 for d in written["docs"] if d[3] is not None) == 36, "each session's facts link to the previous one"
    document = await export_text(database_url, user)
    async with await MemoryAdmin.connect(database_url) as admin:
        await admin.erase_user(user)
    assert index_of(admin_conn, user) == {name: [] for name in INDEX_SQL}

    report = await import_into_url(database_url, document)
    assert report.rows["memories"] == 40
    assert index_of(admin_conn, user) == written
    assert await export_text(database_url, user) == document

    # The next fact written the usual way is numbered after the restored ones and linked to its session.
    admin_conn.execute(
        "insert into public.user_memory (user_id, kind, category, content, content_hash, confidence, source,"
        " session_id) values (%s, 'fact', 'fact', 'Otro hecho', 'h-new', 0.8, 'inferred', 's-1')",
        (user,),
    )
    docs = index_of(admin_conn, user)["docs"]
    assert docs[-1][2] == 41
    assert docs[-1][3] == next(d[0] for d in reversed(docs[:-1]) if d[1] == "s-1")
    assert index_of(admin_conn, user)["counts"][0][:2] == (41, 41)


async def test_an_import_past_the_fact_limit_is_counted_like_any_service_write(
    database_url: str, admin_conn: Conn
) -> None:
    user = uuid4()
    admin_conn.execute(FACTS_SQL, {"user": user, "facts": 12})
    document = await export_text(database_url, user)
    async with await MemoryAdmin.connect(database_url) as admin:
        await admin.erase_user(user)
    await import_into_url(database_url, document)
    assert index_of(admin_conn, user)["usage"] == [("facts_per_user", 12)]
    # The restored count is what the limit compares: a user at their limit gets the database's refusal.
    admin_conn.execute(
        "insert into memory_private.memory_limits (name, user_id, value) values ('facts_per_user', %s, 12)", (user,)
    )
    with psycopg.connect(database_url) as conn:
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute("select set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": str(user)}),))
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(
                "insert into public.user_memory (user_id, kind, category, content, content_hash, confidence, source)"
                " values (%s, 'fact', 'fact', 'uno más', 'h-13', 0.5, 'inferred')",
                (user,),
            )
        assert refused.value.sqlstate == "PT413"


def test_a_user_cannot_skip_the_index_of_their_own_writes(database_url: str, admin_conn: Conn) -> None:
    user = uuid4()
    with psycopg.connect(database_url) as conn:
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute("select set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": str(user)}),))
        conn.execute("select set_config('memory_plugin.bulk_load', 'on', true)")
        conn.execute(
            "insert into public.user_memory (user_id, kind, category, content, content_hash, confidence, source)"
            " values (%s, 'fact', 'fact', 'Prefiere titanio', 'h-1', 0.5, 'inferred')",
            (user,),
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select memory_private.memory_search_index_facts(%s)", (user,))
        conn.rollback()
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute("select set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": str(user)}),))
        conn.execute("select set_config('memory_plugin.bulk_load', 'on', true)")
        conn.execute(
            "insert into public.user_memory (user_id, kind, category, content, content_hash, confidence, source)"
            " values (%s, 'fact', 'fact', 'Prefiere titanio', 'h-1', 0.5, 'inferred')",
            (user,),
        )
        conn.commit()
    indexed = index_of(admin_conn, user)
    assert [d[4] for d in indexed["docs"]] == ["Prefiere titanio"]
    assert indexed["terms"]
    assert indexed["counts"][0][:2] == (1, 1)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="bulk load"):
        admin_conn.execute("select memory_private.memory_search_index_facts(%s)", (user,))


@pytest.mark.slow
def test_the_import_bench_compares_two_checkouts(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[1]
    assert main(["--before", str(root), "--after", str(root), "--sizes", "200"]) == 0
    out = capsys.readouterr().out
    assert "| 200 " in out
    assert "yes" in out  # the round trip gave the same document
