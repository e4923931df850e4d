"""Cross-tenant isolation, enforced by the database, for every table, view and function the migrations create
(in `public` and in the internal schema `memory_private`).

User A (role `authenticated` with A's JWT claims, exactly as PostgREST and `PostgresStore` set them) tries
to read, change, delete and create B's rows directly, through every view and through every RPC, including
RPCs given B's id as an argument; `anon` tries to read anything. Every attempt fails or returns nothing,
and B's rows are byte-for-byte unchanged afterwards. The lists below are checked against the catalog, so a
new table, view or function fails this module until its attack is written here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg import sql

from memory_plugin.models import MemorizedFact, ProjectRecord, UserPreferences
from memory_plugin.write.items import items_from_update

Conn = psycopg.Connection[tuple[Any, ...]]

SCHEMAS = ("public", "memory_private")
# A valid new row for each table holding per-user rows (schema-qualified), with `user_id` left to the attack.
NEW_ROW: dict[str, dict[str, Any]] = {
    "public.user_memory": {"kind": "fact", "category": "preference", "content": "injected", "content_hash": "x"},
    "memory_private.memory_applied_writes": {"write_id": "00000000-0000-4000-8000-000000000001", "item_count": 1},
    # memory_id must exist (foreign key): B's own fact, looked up by the test before the attack.
    "public.memory_search_docs": {"memory_id": "{b_fact}", "content": "injected"},
    "memory_private.memory_search_terms": {"memory_id": "{b_fact}", "lexeme": "injected", "tf": 1},
    "memory_private.memory_search_counts": {"docs": 1},
    "public.memory_slots": {"slots": '{"goal": [{"text": "injected"}]}'},
    "public.memory_summaries": {"scope": "user", "version": 9, "content": "injected", "kind": "model"},
    "public.chats": {"title": "injected", "full_history": "[]"},
    "memory_private.chat_append_keys": {
        "chat_id": "00000000-0000-4000-8000-000000000002",
        "idempotency_key": "injected",
        "request_hash": "x",
        "turns": 1,
    },
    "memory_private.memory_turn_keys": {"key": "injected", "request_hash": "h"},
    "memory_private.workflow_checkpoints": {"session_id": "s1", "step": "injected", "state": "{}"},
    "memory_private.memory_sessions": {"session_id": "injected-session", "last_active": 1.0},
    "public.memory_jobs": {"session_id": "s", "payload": "{}"},
    "public.conversations": {"conversation_id": "injected", "revision": "r1"},
    "public.conversation_entries": {"id": "injected", "message": '{"kind": "request", "parts": []}'},
    "memory_private.memory_consent": {"paused": True},
    "memory_private.memory_receipts": {"session_id": "s1", "receipt": "{}"},
    "memory_private.memory_limits": {"name": "facts_per_user", "value": 1e9},
    "memory_private.memory_usage": {"counted": "facts_per_user", "n": 0},
    "memory_private.memory_write_buckets": {"tokens": 1e9, "refilled_at": "2030-01-01"},
}

# Tables a user may only read (update and delete are granted without a policy: they change no row).
READ_ONLY = {"memory_private.memory_limits", "memory_private.memory_usage", "memory_private.memory_write_buckets"}
# Tables a user writes and deletes but never changes (update granted without a policy: it changes no row).
APPEND_ONLY = {"memory_private.memory_receipts"}


def _table(name: str) -> sql.Identifier:
    """`schema.table` as a qualified identifier."""
    schema, _, table = name.partition(".")
    return sql.Identifier(schema, table)


def _items_json() -> str:
    fact = MemorizedFact(content="Prefiere latón", category="preference", confidence=0.9, source="explicit")
    return json.dumps([i.as_json() for i in items_from_update([fact], None, None, [], None)])


_VECTOR = "[" + ",".join(["0.05"] * 384) + "]"


def _rpc_args(b: UUID, admin_conn: Conn) -> dict[str, Any]:
    """Arguments of the RPC attacks: B's id, items, a vector, and vectors for B's own content hashes."""
    hashes = admin_conn.execute(
        "select content_hash, content from public.user_memory where user_id = %s and kind = 'fact'", (b,)
    ).fetchall()
    embeddings = [{"content_hash": h, "content": c, "embedding": [0.05] * 384} for h, c in hashes]
    chat = admin_conn.execute("select id from public.chats where user_id = %s", (b,)).fetchone()
    fact = admin_conn.execute(
        "select category, match_guard, match_key, match_words from public.user_memory"
        " where user_id = %s and kind = 'fact' and match_key is not null limit 1",
        (b,),
    ).fetchone() or ("fact", "", "x", [])
    return {
        "b": b, "items": _items_json(), "vector": _VECTOR, "embeddings": json.dumps(embeddings),
        "b_chat": chat[0] if chat else None,
        "b_category": fact[0], "b_guard": fact[1], "b_key": fact[2], "b_words": fact[3],
    }  # fmt: skip


# How to call each public function with B's id; `{b}` is B's id. Its result must hold nothing of B's.
RPC_CALLS: dict[str, str] = {
    # The job queue's functions: executable by memory_worker and service_role only.
    "memory_jobs_tail": "select memory_private.memory_jobs_tail('[1,2]'::jsonb, 1)",
    "memory_jobs_enqueue": "select * from memory_private.memory_jobs_enqueue({b}, 's', '[]', 'explicit', 10, 10, 10)",
    "memory_jobs_claim": "select * from memory_private.memory_jobs_claim('w', 10, 60)",
    "memory_jobs_promote": "select memory_private.memory_jobs_promote(array[{b}], 10, 10)",
    "memory_jobs_extend": "select memory_private.memory_jobs_extend(1, 'w', 60)",
    "memory_jobs_hold": "select * from memory_private.memory_jobs_hold(1, 'w')",
    "memory_jobs_complete": "select memory_private.memory_jobs_complete(1, 'w')",
    "memory_jobs_fail": "select memory_private.memory_jobs_fail(1, 'w', 'e', 1, false)",
    "memory_jobs_release": "select memory_private.memory_jobs_release(1, 'w')",
    "memory_jobs_forget": "select memory_private.memory_jobs_forget({b}, '[]'::jsonb)",
    "memory_jobs_retry_dead": "select memory_private.memory_jobs_retry_dead({b})",
    "memory_jobs_status": "select * from memory_private.memory_jobs_status()",
    "memory_jobs_unsettled": "select * from memory_private.memory_jobs_unsettled(array[1]::bigint[])",
    "memory_upsert_items": "select * from public.memory_upsert_items({b}, %(items)s::jsonb)",
    # The bounds' helpers (called by their triggers as the owner): executable by service_role only, but the
    # slots check a user's own writes run.
    "memory_bounds_enforced": "select memory_private.memory_bounds_enforced()",
    # Bulk loads (an import, service path only): the switch reads false as a user; indexing is refused.
    "memory_bulk_load": "select 1 where memory_private.memory_bulk_load()",
    "memory_search_index_facts": "select memory_private.memory_search_index_facts({b})",
    "memory_limit": "select memory_private.memory_limit({b}, 'facts_per_user')",
    "memory_usage_add": "select memory_private.memory_usage_add({b}, 'facts_per_user', -1000, false)",
    "user_memory_charge": "select memory_private.user_memory_charge({b}, 1000000, -1000, 0, 0, 0, false)",
    # The memory switch's check (called by the write triggers as the owner): service_role only.
    "memory_refuse_paused": "select memory_private.memory_refuse_paused({b})",
    "memory_slots_bounded": "select 1 where not memory_private.memory_slots_bounded('{{}}'::jsonb)",
    "memory_context": "select * from public.memory_context({b})",
    "memory_rank_facts": "select * from public.memory_rank_facts({b}, 100, 0.6, 0.3, 0.1, 30, now())",
    "memory_fact_history": "select * from public.memory_fact_history({b})",
    # Counting B's facts counts none (so the query returns no row).
    "memory_fact_count": "select * from public.memory_fact_count({b}) where memory_fact_count > 0",
    # Hybrid search with B's id, a text every fact of B matches and a vector: nothing of B's comes back.
    "memory_search": "select * from public.memory_search({b}, 'Bob prefiere titanio', %(vector)s::extensions.vector,"
    " 'test', 50, 50, p_exact_scan_below => 0)",
    # Writing vectors onto B's facts (by B's content hashes) stores nothing.
    "memory_set_embeddings": "select * from public.memory_set_embeddings({b}, 'test', %(embeddings)s::jsonb)"
    " where memory_set_embeddings > 0",
    "memory_upsert_embedded": "select * from public.memory_upsert_embedded({b}, %(items)s::jsonb, 0.1, null, 0.8,"
    " 'test')",
    "memory_embedding_backlog": "select * from public.memory_embedding_backlog({b}, 'other-model')",
    # Chat search with B's id, B's chat's words and the vector of B's summary: nothing of B's comes back.
    "chat_search": "select * from public.chat_search({b}, 'Bob titanio bridas', %(vector)s::extensions.halfvec,"
    " 'test')",
    # Appending to B's chat, by its id, with and without an idempotency key: nothing appended, nothing returned.
    "chat_append": "select * from public.chat_append({b}, %(b_chat)s, '[{{\"kind\": \"request\"}}]'::jsonb, 'k', 'h')"
    " union all select * from public.chat_append({b}, %(b_chat)s, '[]'::jsonb)",
    # Creating a chat for B, with B's own creating key and request hash (a replay would return B's chat), or
    # with a new key: refused (RLS checks the row before the key's conflict), nothing returned.
    "chat_create": "select * from public.chat_create({b}, 'x', '[]'::jsonb, 'k', 'h')",
    "chat_create_new_key": "select * from public.chat_create({b}, 'x', '[]'::jsonb, 'k2', 'h')",
    # Claiming B's turn keys with B's id: B's finished key with its own hash (a replay would return B's answer),
    # B's running key with a lease of 0 (a takeover would hand A B's claim), and a new key: refused (RLS checks
    # the new row before the key's conflict), nothing returned, nothing of B's pruned.
    "memory_turn_key_claim": "select * from public.memory_turn_key_claim({b}, 'k', 'h')",
    "memory_turn_key_claim_running": "select * from public.memory_turn_key_claim({b}, 'k-running', 'h', 0)",
    "memory_turn_key_claim_new": "select * from public.memory_turn_key_claim({b}, 'k-new', 'h')",
    # Pure text functions: they read no table; called over B's rows they see none.
    "memory_tsvector": "select memory_private.memory_tsvector(m.content) from public.user_memory m"
    " where m.user_id = {b}",
    "memory_has_time_expression": "select memory_private.memory_has_time_expression(m.content)"
    " from public.user_memory m where m.user_id = {b}",
    # The near-duplicate index keys: pure hashes of their arguments; over B's rows they see none.
    "memory_fact_word_keys": "select memory_private.memory_fact_word_keys(m.user_id, m.category, 'g', '{{w}}')"
    " from public.user_memory m where m.user_id = {b}",
    "memory_fact_anchor": "select memory_private.memory_fact_anchor(m.user_id, m.category, 'g', '{{w}}')"
    " from public.user_memory m where m.user_id = {b}",
    "memory_fact_prefix": "select memory_private.memory_fact_prefix(m.user_id, m.category, 'g', '{{w}}')"
    " from public.user_memory m where m.user_id = {b}",
    "memory_fact_prefixes": "select memory_private.memory_fact_prefixes(m.user_id, m.category, 'g', '{{w}}')"
    " from public.user_memory m where m.user_id = {b}",
    # The near-duplicate probes with B's id and the category, guard and key of a fact of B's, every candidate
    # accepted (threshold 0 / -1): no hash of B's comes back.
    "memory_near_duplicate": "select h from memory_private.memory_near_duplicate({b}, %(b_category)s, %(b_guard)s,"
    " %(b_key)s, %(b_words)s, null, 0, now()) as h where h is not null",
    "memory_near_embedded": "select h from memory_private.memory_near_embedded({b}, 'test',"
    " %(vector)s::extensions.halfvec, %(b_category)s, %(b_guard)s, null, -1, now()) as h where h is not null",
}
TRIGGER_FUNCTIONS = {
    "user_memory_touch_updated_at",
    "memory_search_docs_sync",
    "memory_search_docs_drop",
    "memory_search_docs_follow_fact",
    "memory_search_terms_sync",
    "memory_search_counts_add",
    "memory_search_counts_remove",
    "memory_bounds_count",
    "user_memory_bounds",
    "user_memory_kind_moved",
    "memory_bounds_keep_owner",
    "memory_summaries_keep_newest",
    "memory_pause_guard",
    "memory_receipts_keep_newest",
}
# Security definer, and why: the bounds' counting triggers write the per-user counters and write buckets, which
# no user may write (a user could reset their own count); the pause guard reads the switch of every user a
# statement wrote rows of, whatever that user's RLS shows. A trigger function cannot be called directly, only
# fired by a write to its table (checked below); tests/test_db_bounds.py checks that a user cannot change them.
DEFINER_TRIGGERS = {
    "memory_bounds_count",
    "user_memory_bounds",
    "memory_pause_guard",
    "user_memory_kind_moved",
}
# Security definer so that its key comparisons are index conditions (under the caller's RLS they are not: not
# leakproof); it reads the caller's own facts only, which its attack in RPC_CALLS checks.
DEFINER_GUARDED = {"memory_near_duplicate"}


@pytest.fixture
def conn(database_url: str) -> Iterator[Conn]:
    with psycopg.connect(database_url) as c:  # not autocommit: every attempt is a transaction rolled back
        yield c


@contextmanager
def acting_as(conn: Conn, role: str, user: UUID | None) -> Iterator[Conn]:
    """One transaction as `role` with `user`'s claims (what PostgREST does per request), then rolled back."""
    try:
        conn.execute("select set_config('role', %s, true)", (role,))
        if user is not None:
            claims = json.dumps({"sub": str(user), "role": role})
            conn.execute("select set_config('request.jwt.claims', %s, true)", (claims,))
        yield conn
    finally:
        conn.rollback()


def _catalog(conn: Conn, query: str) -> set[str]:
    rows = conn.execute(query).fetchall()
    conn.rollback()
    return {r[0] for r in rows}


@pytest.fixture
def tables(conn: Conn) -> set[str]:
    """Tables users reach (`schema.table`): partitions are left out (reached through their table; see below)."""
    return _catalog(
        conn,
        "select n.nspname || '.' || c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('public', 'memory_private') and c.relkind in ('r', 'p') and not c.relispartition",
    )


def test_partitions_are_reachable_only_through_their_table(conn: Conn, victims: tuple[UUID, UUID]) -> None:
    partitions = _catalog(
        conn,
        "select n.nspname || '.' || c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('public', 'memory_private') and c.relispartition and c.relkind = 'r'",
    )
    assert partitions, "memory_search_docs is partitioned"
    a, _ = victims
    for partition in sorted(partitions):
        for role, user in (("authenticated", a), ("anon", None)):
            with acting_as(conn, role, user), pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("select * from {}").format(_table(partition)))
    no_rls = _catalog(
        conn,
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('public', 'memory_private') and c.relispartition and c.relkind = 'r'"
        " and not c.relrowsecurity",
    )
    assert no_rls == set()


@pytest.fixture
def victims(admin_conn: Conn) -> tuple[UUID, UUID]:
    """A and B with memory of every kind; returns (a, b)."""
    a, b = uuid4(), uuid4()
    for user, name in ((a, "Alice"), (b, "Bob")):
        items = items_from_update(
            [
                MemorizedFact(
                    content=f"{name} prefiere titanio", category="preference", confidence=0.9, source="explicit"
                )
            ],
            UserPreferences(industry="naval"),
            ProjectRecord(description=f"Proyecto de {name}"),
            [f"{name} pide bridas"],
            None,
        )
        payload = json.dumps([i.as_json() for i in items])
        admin_conn.execute("select public.memory_upsert_items(%s, %s::jsonb)", (user, payload))
        # A chat with a summary and its vector, so the chat attacks have something to find.
        admin_conn.execute(
            "insert into public.chats (user_id, title, summary_text, summary_embedding, summary_model, full_history,"
            " assistant_history, turn_count, create_key, create_hash)"
            " values (%s, %s, %s, %s::extensions.halfvec, 'test', '[]', '[]', 0, 'k', 'h')",
            (user, f"Chat de {name}", f"{name} titanio bridas", _VECTOR),
        )
        admin_conn.execute(
            "insert into memory_private.workflow_checkpoints (user_id, session_id, step, state)"
            " values (%s, 's1', 'route', %s)",
            (user, '{"route": "budget"}'),
        )
        admin_conn.execute(
            "insert into memory_private.memory_sessions (session_id, user_id, messages, last_active)"
            " values (%s, %s, %s, 1)",
            (f"session-of-{name}-{user}", user, '[{"role": "user", "content": "secreto"}]'),
        )
        # A pydantic-ai conversation (record + one entry), as PostgresConversationStore writes it.
        admin_conn.execute(
            "insert into public.conversation_entries (user_id, id, message) values (%s, %s, %s)",
            (
                user,
                f"entry-of-{name}",
                json.dumps({"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "secreto"}]}),
            ),
        )
        admin_conn.execute(
            "insert into public.conversations (user_id, conversation_id, head_id, revision)"
            " values (%s, 'c1', %s, 'r1')",
            (user, f"entry-of-{name}"),
        )
        # Every fact has a vector, so the search attack has something to find.
        admin_conn.execute(
            "update public.memory_search_docs set embedding = %s::extensions.halfvec, embedding_model = 'test'"
            " where user_id = %s",
            (_VECTOR, user),
        )
        # Memory turn keys: a finished one (its answer names a fact) and a running one, a day old (prunable).
        admin_conn.execute(
            "insert into memory_private.memory_turn_keys (user_id, key, request_hash, state, outcome, created_at)"
            " values (%s, 'k', 'h', 'done', %s::jsonb, now()), (%s, 'k-running', 'h', 'running', null,"
            " now() - interval '25 hours')",
            (user, json.dumps({"recorded": True, "stored": [{"content": f"{name} prefiere titanio"}]}), user),
        )
        # Context memory: slots and a rolling summary, so the attacks on those tables have rows to reach.
        admin_conn.execute(
            "insert into public.memory_slots (user_id, slots) values (%s, %s::jsonb)",
            (user, json.dumps({"preferences": [{"text": f"{name} prefiere titanio"}]})),
        )
        admin_conn.execute(
            "insert into public.memory_summaries (user_id, scope, version, content, kind) values (%s, 'user', 1, %s,"
            " 'model')",
            (user, f"{name} pide bridas de titanio"),
        )
    return a, b


def snapshot(admin_conn: Conn, tables: set[str], user: UUID) -> dict[str, list[Any]]:
    """Every row of `user` in every table, as text, for an exact before/after comparison."""
    result = {}
    for table in sorted(tables):
        query = sql.SQL("select t::text from {} t where t.user_id = %s order by 1").format(_table(table))
        result[table] = [r[0] for r in admin_conn.execute(query, (user,)).fetchall()]
    return result


def test_every_table_has_rls_and_an_attack_written_here(conn: Conn, tables: set[str]) -> None:
    assert tables <= set(NEW_ROW), "a new table needs its row in NEW_ROW"
    no_rls = _catalog(
        conn,
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('public', 'memory_private') and c.relkind in ('r', 'p') and not c.relrowsecurity",
    )
    assert no_rls == set()


def test_every_view_is_security_invoker(conn: Conn) -> None:
    definer_views = _catalog(
        conn,
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('public', 'memory_private') and c.relkind = 'v'"
        " and not coalesce('security_invoker=true' = any(c.reloptions), false)",
    )
    assert definer_views == set()


def test_every_function_is_invoker_or_pinned_and_has_an_attack_written_here(conn: Conn) -> None:
    functions = conn.execute(
        "select p.proname, p.prosecdef, coalesce(array_to_string(p.proconfig, ','), ''),"
        " p.prorettype = 'trigger'::regtype"
        " from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
        " where n.nspname in ('public', 'memory_private')"
    ).fetchall()
    conn.rollback()
    names = {name for name, _, _, _ in functions}
    assert names - TRIGGER_FUNCTIONS <= set(RPC_CALLS), "a new function needs its call in RPC_CALLS"
    for name, definer, config, is_trigger in functions:
        assert "search_path=" in config, f"{name} must pin search_path"
        if name in DEFINER_TRIGGERS:
            assert is_trigger, f"{name} is security definer: it must be a trigger function"
            continue
        if name in DEFINER_GUARDED:
            continue
        assert not definer, f"{name} is security definer: state why and add an owner check test"


def test_user_a_cannot_touch_b_directly(
    conn: Conn, admin_conn: Conn, tables: set[str], victims: tuple[UUID, UUID]
) -> None:
    a, b = victims
    before = snapshot(admin_conn, tables, b)
    assert before["public.user_memory"], "B has rows to attack"
    for table in sorted(tables):
        t = _table(table)
        with acting_as(conn, "authenticated", a):
            assert conn.execute(sql.SQL("select * from {} where user_id = %s").format(t), (b,)).fetchall() == []
            rows = conn.execute(sql.SQL("select user_id from {}").format(t)).fetchall()
            assert all(r[0] == a for r in rows)
        with acting_as(conn, "authenticated", a):
            updated = conn.execute(sql.SQL("update {} set user_id = %s where user_id = %s").format(t), (a, b))
            assert updated.rowcount == 0
        with acting_as(conn, "authenticated", a):
            assert conn.execute(sql.SQL("delete from {} where user_id = %s").format(t), (b,)).rowcount == 0
        row = {**NEW_ROW[table], "user_id": b}
        if row.get("memory_id") == "{b_fact}":
            found = admin_conn.execute("select id from public.user_memory where user_id = %s and kind = 'fact'", (b,))
            row["memory_id"] = found.fetchone()[0]  # type: ignore[index]
        insert = sql.SQL("insert into {} ({}) values ({})").format(
            t, sql.SQL(", ").join(map(sql.Identifier, row)), sql.SQL(", ").join(sql.Placeholder() * len(row))
        )
        with acting_as(conn, "authenticated", a), pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(insert, list(row.values()))
        # A's own row cannot be handed over to B either.
        with acting_as(conn, "authenticated", a):
            mine = conn.execute(sql.SQL("select count(*) from {} where user_id = %s").format(t), (a,)).fetchone()
            if mine and mine[0] and table in READ_ONLY | APPEND_ONLY:
                handed = conn.execute(sql.SQL("update {} set user_id = %s where user_id = %s").format(t), (b, a))
                assert handed.rowcount == 0
            elif mine and mine[0]:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql.SQL("update {} set user_id = %s where user_id = %s").format(t), (b, a))
    assert snapshot(admin_conn, tables, b) == before


@pytest.mark.parametrize("function", sorted(RPC_CALLS))
def test_user_a_cannot_reach_b_through_any_rpc(
    conn: Conn, admin_conn: Conn, tables: set[str], victims: tuple[UUID, UUID], function: str
) -> None:
    a, b = victims
    before = snapshot(admin_conn, tables, b)
    query = RPC_CALLS[function].format(b="%(b)s")
    args = _rpc_args(b, admin_conn)
    with acting_as(conn, "authenticated", a):
        try:
            rows = conn.execute(query, args).fetchall()
        except psycopg.errors.InsufficientPrivilege:
            rows = []  # refused outright (e.g. a write as B): as good as nothing
        assert rows == []
    assert snapshot(admin_conn, tables, b) == before


@pytest.mark.parametrize("function", sorted(RPC_CALLS))
def test_anon_can_call_no_rpc(conn: Conn, admin_conn: Conn, victims: tuple[UUID, UUID], function: str) -> None:
    _, b = victims
    args = _rpc_args(b, admin_conn)
    with acting_as(conn, "anon", None), pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(RPC_CALLS[function].format(b="%(b)s"), args)


def test_anon_can_read_no_table(conn: Conn, tables: set[str], victims: tuple[UUID, UUID]) -> None:
    for table in sorted(tables):
        with acting_as(conn, "anon", None), pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("select * from {}").format(_table(table)))


def test_authenticated_without_a_user_sees_nothing(conn: Conn, tables: set[str], victims: tuple[UUID, UUID]) -> None:
    for table in sorted(tables):
        with acting_as(conn, "authenticated", None):
            assert conn.execute(sql.SQL("select * from {}").format(_table(table))).fetchall() == []


def test_user_a_cannot_supersede_b_facts_by_naming_them(
    conn: Conn, admin_conn: Conn, tables: set[str], victims: tuple[UUID, UUID]
) -> None:
    """`replaces` names a row by id: A writing as A, naming B's fact, must leave B's fact current and unchanged."""
    a, b = victims
    [b_fact] = admin_conn.execute(
        "select id from public.user_memory where user_id = %s and kind = 'fact'", (b,)
    ).fetchall()
    before = snapshot(admin_conn, tables, b)
    fact = MemorizedFact(
        content="Bob cambió de proveedor",  # no slot: only `replaces` could touch B's fact
        category="contact",
        confidence=0.9,
        source="explicit",
        replaces=b_fact[0],
    )
    items = json.dumps([i.as_json() for i in items_from_update([fact], None, None, [], None)])
    with acting_as(conn, "authenticated", a):
        rows = conn.execute("select id, user_id, invalid_at from public.memory_upsert_items(%s, %s::jsonb)", (a, items))
        assert [(r[1], r[2]) for r in rows.fetchall()] == [(a, None)]  # only A's new fact, nothing superseded
        conn.commit()  # committed, so that a change to B's row would show in the check below
    assert snapshot(admin_conn, tables, b) == before


# --- side channels: what a user can learn about others without reading their rows ---------------------------------


def _outcome(conn: Conn, statement: str, args: tuple[Any, ...]) -> str:
    """`ok`, or the class of the error the statement raised (inside the caller's transaction)."""
    try:
        with conn.transaction():
            conn.execute(statement, args)
    except psycopg.Error as exc:
        return type(exc).__name__
    return "ok"


def test_foreign_keys_do_not_tell_whether_another_users_id_exists(conn: Conn, admin_conn: Conn, victims: Any) -> None:
    """Naming B's fact in a reference is refused exactly as naming an id nobody has."""
    a, b = victims
    [a_fact] = admin_conn.execute("select id from public.user_memory where user_id = %s and kind = 'fact'", (a,))
    [b_fact] = admin_conn.execute("select id from public.user_memory where user_id = %s and kind = 'fact'", (b,))
    probes = {
        "superseded_by": "update public.user_memory set superseded_by = %s where id = %s",
        "memory_search_docs.memory_id": "insert into public.memory_search_docs (memory_id, user_id, content)"
        " values (%s, %s, 'probe')",
    }
    for name, statement in probes.items():
        second = a_fact[0] if name == "superseded_by" else a
        with acting_as(conn, "authenticated", a):
            existing = _outcome(conn, statement, (b_fact[0], second))
            missing = _outcome(conn, statement, (uuid4(), second))
        # memory_search_docs has no foreign key: a trigger refuses a row naming anything but one of the user's
        # own facts, with the foreign key's SQLSTATE, whether or not the id is another user's.
        assert existing == missing == "ForeignKeyViolation", name


def test_a_conversation_entry_cannot_tell_whether_another_users_entry_exists(conn: Conn, victims: Any) -> None:
    """An entry naming B's entry as its parent is refused exactly as one naming an entry nobody has."""
    a, _ = victims
    statement = "insert into public.conversation_entries (user_id, id, parent_id, message) values (%s, %s, %s, '{}')"
    with acting_as(conn, "authenticated", a):
        existing = _outcome(conn, statement, (a, "probe-1", "entry-of-Bob"))
        missing = _outcome(conn, statement, (a, "probe-2", f"entry-{uuid4()}"))
        own = _outcome(conn, statement, (a, "probe-3", "entry-of-Alice"))
    assert existing == missing == "ForeignKeyViolation"
    assert own == "ok"


def test_another_users_write_id_never_swallows_a_write(conn: Conn, admin_conn: Conn) -> None:
    """Write ids are chosen by clients: B's write with the id A used first is applied, and A's replay still works."""
    a, b, write_id = uuid4(), uuid4(), uuid4()
    upsert = "select user_id, content from public.memory_upsert_items(%s, %s::jsonb, 0.1, %s)"

    def write(user: UUID, text: str) -> list[tuple[Any, ...]]:
        fact = MemorizedFact(content=text, category="preference", confidence=0.9, source="explicit")
        items = json.dumps([i.as_json() for i in items_from_update([fact], None, None, [], None)])
        with acting_as(conn, "authenticated", user):
            rows = conn.execute(upsert, (user, items, write_id)).fetchall()
            conn.commit()
        return rows

    assert write(a, "Alice prefiere titanio") == [(a, "Alice prefiere titanio")]
    assert write(b, "Bob prefiere acero") == [(b, "Bob prefiere acero")]
    assert write(a, "Alice prefiere titanio") == [(a, "Alice prefiere titanio")]  # a replay: the same rows
    stored = admin_conn.execute(
        "select user_id, relevance_count from public.user_memory where user_id = any(%s) order by content", ([a, b],)
    ).fetchall()
    assert stored == [(a, 0), (b, 0)]  # each applied once


def test_no_shared_counter_shows_other_users_write_rate(conn: Conn, admin_conn: Conn) -> None:
    """The insertion order of a user's facts counts their own writes only; no sequence is readable by users."""
    a, b = uuid4(), uuid4()
    for user, text in ((a, "Alice uno"), (b, "Bob uno"), (b, "Bob dos"), (b, "Bob tres"), (a, "Alice dos")):
        fact = MemorizedFact(content=text, category="fact", confidence=0.9, source="explicit")
        items = json.dumps([i.as_json() for i in items_from_update([fact], None, None, [], None)])
        with acting_as(conn, "authenticated", user):
            conn.execute("select public.memory_upsert_items(%s, %s::jsonb)", (user, items))
            conn.commit()
    with acting_as(conn, "authenticated", a):
        seqs = conn.execute("select seq from public.memory_search_docs order by seq").fetchall()
    assert seqs == [(1,), (2,)]
    readable = admin_conn.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where c.relkind = 'S' and n.nspname in ('public', 'memory_private')"
        " and (has_sequence_privilege('authenticated', c.oid, 'usage')"
        "      or has_sequence_privilege('authenticated', c.oid, 'select'))"
    ).fetchall()
    assert readable == []
