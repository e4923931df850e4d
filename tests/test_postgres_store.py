"""Postgres only: the migration, the schema and its row-level security, one round trip per write, and the SQL
ranking matching `memory_plugin.ranking`. Everything runs on the real embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from memory_plugin import MemorizedFact, MemoryManager, MemoryUpdate, PostgresStore, ProjectRecord, UserPreferences
from memory_plugin.database.migrations import load_migrations, migrate
from memory_plugin.errors import StoreError
from memory_plugin.outage import ResilientStore
from memory_plugin.quality import DecayPolicy
from memory_plugin.ranking import RankingWeights, fact_score
from memory_plugin.store import ContextQuery
from memory_plugin.store.postgres import IDENTITY_PRELUDE_SQL
from memory_plugin.write.items import items_from_update

AdminConn = psycopg.Connection[tuple[Any, ...]]

# The last three: half-lives per category (jsonb), decay floor, rejections returned beside the ranked facts.
CONTEXT_FN = (
    "public.memory_context(uuid, integer, integer, integer, real, real, real, real, timestamptz, jsonb, real, integer)"
)
# p_write_id (idempotency key), then p_near_duplicate_threshold.
UPSERT_FN = "public.memory_upsert_items(uuid, jsonb, real, uuid, real)"


def fact(content: str, **kw: Any) -> MemorizedFact:
    kw.setdefault("confidence", 0.8)
    kw.setdefault("category", "preference")
    return MemorizedFact(content=content, source="explicit", **kw)


def items_json(*facts: MemorizedFact, **kw: Any) -> str:
    items = items_from_update(facts, kw.get("preferences"), kw.get("project"), kw.get("patterns", ()), None)
    return json.dumps([i.as_json() for i in items])


def admin_upsert(admin_conn: AdminConn, user: UUID, *facts: MemorizedFact, **kw: Any) -> None:
    admin_conn.execute(f"select * from {UPSERT_FN.split('(')[0]}(%s, %s::jsonb, 0.1)", (user, items_json(*facts, **kw)))


def rows_of(admin_conn: AdminConn, user: UUID) -> list[tuple[Any, ...]]:
    return admin_conn.execute(
        "select id, kind, category, content, confidence, relevance_count, updated_at from public.user_memory"
        " where user_id = %s order by id",
        (user,),
    ).fetchall()


# --- migration and schema ------------------------------------------------------------------------------------------


async def test_migration_applies_to_a_fresh_database_and_is_idempotent(
    admin_conn: AdminConn, database_url: str
) -> None:
    name = f"mp_migrate_{uuid4().hex[:12]}"
    admin_conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = make_conninfo(database_url, dbname=name)
    try:
        expected = [m.version for m in load_migrations()]
        assert expected, "supabase/migrations/ holds the migrations"
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            assert await migrate(conn) == expected
            assert await migrate(conn) == []  # nothing left to apply
            cur = await conn.execute("select version, name from supabase_migrations.schema_migrations order by version")
            assert await cur.fetchall() == [(m.version, m.name) for m in load_migrations()]
            cur = await conn.execute(
                "select to_regclass('public.user_memory') is not null, to_regprocedure('auth.uid()') is not null"
            )
            assert await cur.fetchone() == (True, True)

        # Two processes migrating at once: the advisory lock serialises them, the second finds nothing to do.
        async with (
            await psycopg.AsyncConnection.connect(url, autocommit=True) as c1,
            await psycopg.AsyncConnection.connect(url, autocommit=True) as c2,
        ):
            assert await asyncio.gather(migrate(c1), migrate(c2)) == [[], []]

        # The migrated database works end to end.
        store = await PostgresStore.connect(url)
        try:
            async with MemoryManager.open(store=store) as memory:
                user = uuid4()
                await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[fact("Prefiere latón")]))
                ctx = await memory.get_memory_context("s", user)
                assert [f.content for f in ctx.long_term.facts] == ["Prefiere latón"]
        finally:
            await store.close()
    finally:
        admin_conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


async def test_concurrent_first_migrations_apply_once(admin_conn: AdminConn, database_url: str) -> None:
    name = f"mp_migrate_{uuid4().hex[:12]}"
    admin_conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = make_conninfo(database_url, dbname=name)
    try:
        async with (
            await psycopg.AsyncConnection.connect(url, autocommit=True) as c1,
            await psycopg.AsyncConnection.connect(url, autocommit=True) as c2,
        ):
            results = await asyncio.gather(migrate(c1), migrate(c2))
            assert sorted(results) == [[], [m.version for m in load_migrations()]]
    finally:
        admin_conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


def test_the_public_schema_holds_only_what_a_person_reads(admin_conn: AdminConn) -> None:
    """The table editor and the REST API show user_memory, the facts' search rows, each user's structured slots
    and rolling summaries (memory a person reads, like the facts), and their chats and pydantic-ai conversations
    (records and messages: what a chat UI shows); the machinery (postings,
    counts, partitions, applied writes, trigger and text helpers) is in `memory_private`, which the API does not
    expose; user_memory's internal key columns say so in their comments."""
    tables = admin_conn.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = 'public' and c.relkind in ('r', 'p') order by 1"
    ).fetchall()
    assert tables == [
        ("chats",),
        ("conversation_entries",),
        ("conversations",),
        ("memory_jobs",),
        ("memory_search_docs",),
        ("memory_slots",),
        ("memory_summaries",),
        ("user_memory",),
    ]
    functions = admin_conn.execute(
        "select p.proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
        " where n.nspname = 'public' and p.prorettype <> 'trigger'::regtype order by 1"
    ).fetchall()
    assert [f[0] for f in functions] == [
        "chat_append",  # a chat's append with its idempotency key, as the user (RLS): what PATCH does
        "chat_create",  # a chat's creation with its idempotency key, as the user (RLS): what POST does
        "chat_search",
        "memory_context",
        "memory_embedding_backlog",
        "memory_fact_count",
        "memory_fact_history",
        "memory_rank_facts",
        "memory_search",
        "memory_set_embeddings",
        "memory_turn_key_claim",  # a memory turn's idempotency key, as the user (RLS): what POST /api/memory/turns does
        "memory_upsert_embedded",
        "memory_upsert_items",
    ]
    internal = admin_conn.execute(
        "select a.attname from pg_attribute a where a.attrelid = 'public.user_memory'::regclass and a.attnum > 0"
        " and col_description(a.attrelid, a.attnum) like 'Internal%%' order by a.attnum"
    ).fetchall()
    assert [c[0] for c in internal] == ["content_hash", "slot", "match_key", "match_guard", "match_words"]
    exposed = tomllib.loads((Path(__file__).resolve().parents[1] / "supabase" / "config.toml").read_text())
    assert "memory_private" not in exposed["api"]["schemas"]
    assert admin_conn.execute("select has_schema_privilege('anon', 'memory_private', 'usage')").fetchone() == (False,)


def test_table_has_the_documented_columns(admin_conn: AdminConn) -> None:
    columns = dict(
        admin_conn.execute(
            "select attname, format_type(atttypid, atttypmod) from pg_attribute"
            " where attrelid = 'public.user_memory'::regclass and attnum > 0 and not attisdropped"
        ).fetchall()
    )
    assert columns == {
        "id": "uuid",
        "user_id": "uuid",
        "kind": "text",
        "category": "text",
        "content": "text",
        "confidence": "real",
        "source": "text",
        "importance": "smallint",
        "relevance_count": "integer",
        "source_message_ids": "text[]",
        "session_id": "text",
        "attributes": "jsonb",
        "content_hash": "text",
        "key_id": "text",
        "created_at": "timestamp with time zone",
        "updated_at": "timestamp with time zone",
        "last_reinforced_at": "timestamp with time zone",
        "occurred_at": "timestamp with time zone",
        "expires_at": "timestamp with time zone",
        "invalid_at": "timestamp with time zone",
        "superseded_by": "uuid",
        "archived_at": "timestamp with time zone",
        "metadata": "jsonb",
        "slot": "text",
        "match_key": "text",
        "match_guard": "text",
        "match_words": "text[]",
    }
    unique = admin_conn.execute(
        "select pg_get_constraintdef(oid) from pg_constraint where conrelid = 'public.user_memory'::regclass"
        " and contype = 'u'"
    ).fetchall()
    assert unique == [("UNIQUE (user_id, content_hash)",)]


def test_row_level_security_is_on_with_policies_for_authenticated(admin_conn: AdminConn) -> None:
    assert admin_conn.execute(
        "select relrowsecurity from pg_class where oid = 'public.user_memory'::regclass"
    ).fetchone() == (True,)
    policies = admin_conn.execute(
        "select cmd, roles::text[], coalesce(qual, ''), coalesce(with_check, '') from pg_policies"
        " where schemaname = 'public' and tablename = 'user_memory' order by cmd"
    ).fetchall()
    assert [p[0] for p in policies] == ["DELETE", "INSERT", "SELECT", "UPDATE"]
    for cmd, roles, qual, with_check in policies:
        assert roles == ["authenticated"], cmd
        for expr in (qual, with_check) if cmd == "UPDATE" else (with_check,) if cmd == "INSERT" else (qual,):
            assert "auth.uid()" in expr
            assert "user_id" in expr

    def table_priv(role: str, priv: str) -> bool:
        row = admin_conn.execute("select has_table_privilege(%s, 'public.user_memory', %s)", (role, priv)).fetchone()
        assert row is not None
        return bool(row[0])

    def fn_priv(role: str, fn: str) -> bool:
        row = admin_conn.execute("select has_function_privilege(%s, %s, 'execute')", (role, fn)).fetchone()
        assert row is not None
        return bool(row[0])

    for priv in ("select", "insert", "update", "delete"):
        assert table_priv("authenticated", priv)
        assert not table_priv("anon", priv)
    for fn in (CONTEXT_FN, UPSERT_FN):
        assert fn_priv("authenticated", fn)
        assert not fn_priv("anon", fn)
    # security invoker: the functions run with the caller's rights, so RLS applies inside them.
    definers = admin_conn.execute(
        "select proname, prosecdef from pg_proc where proname in ('memory_context', 'memory_upsert_items') order by 1"
    ).fetchall()
    assert definers == [("memory_context", False), ("memory_upsert_items", False)]


# --- one round trip ------------------------------------------------------------------------------------------------


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement sent through any psycopg async cursor (which `conn.execute` uses) while the test runs,
    except the background worker's polls for queued and deferred jobs (they run on their own clock, not for the
    write)."""
    calls: list[str] = []
    original_execute = psycopg.AsyncCursor.execute
    original_executemany = psycopg.AsyncCursor.executemany

    async def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if not any(poll in str(query) for poll in ("memory_jobs_claim", "memory_jobs_promote")):
            calls.append(str(query))
        return await original_execute(self, query, params, **kw)

    async def executemany(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
        calls.append(f"executemany {query}")
        return await original_executemany(self, query, params_seq, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
    monkeypatch.setattr(psycopg.AsyncCursor, "executemany", executemany)
    return calls


async def test_a_batch_of_100_facts_is_one_statement(
    pg_memory: MemoryManager, user_id: UUID, admin_conn: AdminConn, executed: list[str]
) -> None:
    facts = [fact(f"Hecho número {i}", importance=1 + i % 5) for i in range(100)]
    await pg_memory._writer.fact_limit.check(user_id, 1)  # the user's fact count is read once per process
    executed.clear()
    stored = await pg_memory.update_memory(
        MemoryUpdate(
            user_id=user_id,
            new_facts=facts,
            preferences=UserPreferences(preferred_materials=["latón", "cobre"], industry="naval"),
            project=ProjectRecord(description="20 bridas de latón"),
            patterns=["Pide bridas"],
        )
    )
    # One message: the user's identity prelude, then the one statement doing the work.
    assert len(executed) == 1
    assert executed[0].startswith(IDENTITY_PRELUDE_SQL)
    assert "memory_upsert_items" in executed[0] or "memory_upsert_embedded" in executed[0]
    assert len(stored) == 100
    count = admin_conn.execute("select count(*) from public.user_memory where user_id = %s", (user_id,)).fetchone()
    assert count == (100 + 3 + 1 + 1,)

    executed.clear()
    await pg_memory.update_memory(MemoryUpdate(user_id=user_id, new_facts=facts))  # 100 reinforcements
    assert len(executed) == 1
    assert admin_conn.execute(
        "select count(*), min(relevance_count), max(relevance_count) from public.user_memory"
        " where user_id = %s and kind = 'fact'",
        (user_id,),
    ).fetchone() == (100, 1, 1)

    executed.clear()
    ctx = await pg_memory.get_memory_context("s", user_id)
    assert len(executed) == 1
    assert "memory_context" in executed[0]
    assert len(ctx.long_term.facts) == pg_memory.settings.max_facts_in_context


# --- row-level security ----------------------------------------------------------------------------------------------


@pytest.fixture
def user_conn(database_url: str) -> Iterator[AdminConn]:
    """A connection on which the test switches to the `authenticated`/`anon` roles, as PostgREST does."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@contextmanager
def acting_as(conn: AdminConn, role: str, user: UUID | None = None) -> Iterator[AdminConn]:
    """A transaction running as `role` with the JWT claims of `user` (reset at the end of the transaction)."""
    with conn.transaction():
        conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
        if user is not None:
            claims = json.dumps({"sub": str(user), "role": role})
            conn.execute("select set_config('request.jwt.claims', %s, true)", (claims,))
        yield conn


@pytest.fixture
def alice_and_bob(admin_conn: AdminConn) -> tuple[UUID, UUID]:
    alice, bob = uuid4(), uuid4()
    admin_upsert(
        admin_conn, alice, fact("Alice prefiere titanio"), fact("Alice necesita ISO 9001", category="requirement")
    )
    admin_upsert(
        admin_conn,
        bob,
        fact("Bob prefiere acero"),
        fact("Bob tiene un límite de 3.000 EUR", category="constraint"),
        preferences=UserPreferences(industry="naval"),
        project=ProjectRecord(description="Proyecto secreto de Bob"),
    )
    return alice, bob


def test_authenticated_user_reads_and_writes_only_their_own_rows(
    user_conn: AdminConn, admin_conn: AdminConn, alice_and_bob: tuple[UUID, UUID]
) -> None:
    alice, bob = alice_and_bob
    bob_before = rows_of(admin_conn, bob)
    assert len(bob_before) == 4
    [bob_fact_id] = [r[0] for r in bob_before if r[3] == "Bob prefiere acero"]
    total = admin_conn.execute("select count(distinct user_id) from public.user_memory").fetchone()
    assert total is not None
    assert total[0] >= 2

    with acting_as(user_conn, "authenticated", alice) as conn:
        # Reads: only Alice's rows, even when asking for Bob's explicitly.
        assert conn.execute("select distinct user_id from public.user_memory").fetchall() == [(alice,)]
        assert conn.execute("select count(*) from public.user_memory").fetchone() == (2,)
        assert conn.execute("select * from public.user_memory where user_id = %s", (bob,)).fetchall() == []
        assert conn.execute("select * from public.user_memory where id = %s", (bob_fact_id,)).fetchall() == []

        # Alice's own work goes through: RLS is not simply blocking everything.
        rows = conn.execute(
            "select content from public.memory_upsert_items(%s, %s::jsonb, 0.1)",
            (alice, items_json(fact("Alice prefiere titanio"), fact("Alice usa planos STEP"))),
        ).fetchall()
        assert sorted(r[0] for r in rows) == ["Alice prefiere titanio", "Alice usa planos STEP"]
        ctx = conn.execute(f"select user_id, content from {CONTEXT_FN.split('(')[0]}(%s)", (alice,)).fetchall()
        assert {r[0] for r in ctx} == {alice}
        assert len(ctx) == 3
        assert (
            conn.execute(
                "update public.user_memory set importance = 5 where content = 'Alice usa planos STEP'"
            ).rowcount
            == 1
        )

        # Writes to Bob's rows: updates and deletes find nothing, inserts are refused.
        assert conn.execute("update public.user_memory set content = 'pwned' where user_id = %s", (bob,)).rowcount == 0
        assert (
            conn.execute("update public.user_memory set content = 'pwned' where id = %s", (bob_fact_id,)).rowcount == 0
        )
        assert conn.execute("delete from public.user_memory where user_id = %s", (bob,)).rowcount == 0
        assert conn.execute("delete from public.user_memory where id = %s", (bob_fact_id,)).rowcount == 0
    assert rows_of(admin_conn, bob) == bob_before

    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):  # noqa: SIM117
        with acting_as(user_conn, "authenticated", alice) as conn:
            conn.execute(
                "insert into public.user_memory (user_id, kind, category, content, content_hash)"
                " values (%s, 'fact', 'preference', 'inyectado por Alice', 'x')",
                (bob,),
            )
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):  # noqa: SIM117
        with acting_as(user_conn, "authenticated", alice) as conn:
            # Handing one's own row over to Bob is refused too (the update's WITH CHECK).
            conn.execute("update public.user_memory set user_id = %s where user_id = %s", (bob, alice))

    # The functions, called by Alice with Bob's id: the context is empty, the write fails.
    with acting_as(user_conn, "authenticated", alice) as conn:
        assert conn.execute(f"select * from {CONTEXT_FN.split('(')[0]}(%s)", (bob,)).fetchall() == []
    for payload in (items_json(fact("Bob ahora prefiere oro")), items_json(fact("Bob prefiere acero"))):
        # A new item (insert path) and a repeat of Bob's stored fact (on conflict update path) alike.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):  # noqa: SIM117
            with acting_as(user_conn, "authenticated", alice) as conn:
                conn.execute("select * from public.memory_upsert_items(%s, %s::jsonb, 0.1)", (bob, payload))

    assert rows_of(admin_conn, bob) == bob_before  # content, confidence, counts and timestamps untouched


def test_unrestricted_delete_by_a_user_removes_only_their_rows(
    user_conn: AdminConn, admin_conn: AdminConn, alice_and_bob: tuple[UUID, UUID]
) -> None:
    alice, bob = alice_and_bob
    bob_before = rows_of(admin_conn, bob)
    with acting_as(user_conn, "authenticated", alice) as conn:
        assert conn.execute("delete from public.user_memory").rowcount == 2
        assert conn.execute("update public.user_memory set confidence = 0.1").rowcount == 0
    assert rows_of(admin_conn, alice) == []
    assert rows_of(admin_conn, bob) == bob_before


def test_authenticated_without_a_user_sees_nothing(user_conn: AdminConn, alice_and_bob: tuple[UUID, UUID]) -> None:
    alice, _ = alice_and_bob
    with acting_as(user_conn, "authenticated") as conn:
        assert conn.execute("select count(*) from public.user_memory").fetchone() == (0,)
        assert conn.execute(f"select * from {CONTEXT_FN.split('(')[0]}(%s)", (alice,)).fetchall() == []


def test_anon_has_no_access_to_memory(user_conn: AdminConn, alice_and_bob: tuple[UUID, UUID]) -> None:
    alice, _ = alice_and_bob
    statements: list[tuple[str, tuple[Any, ...]]] = [
        ("select count(*) from public.user_memory", ()),
        ("select * from public.user_memory where user_id = %s", (alice,)),
        ("delete from public.user_memory where user_id = %s", (alice,)),
        (f"select * from {CONTEXT_FN.split('(')[0]}(%s)", (alice,)),
        ("select * from public.memory_upsert_items(%s, %s::jsonb, 0.1)", (alice, items_json(fact("anon estuvo aquí")))),
    ]
    for statement, params in statements:
        # Even with a JWT naming Alice: the anon role itself has no rights on the table or the functions.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):  # noqa: SIM117
            with acting_as(user_conn, "anon", alice) as conn:
                conn.execute(statement, params)


# --- ranking parity --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weights",
    [RankingWeights(), RankingWeights(importance=0.2, confidence=0.5, recency=0.3, recency_window_days=7.0)],
    ids=["default", "recency-heavy"],
)
async def test_sql_ranking_matches_fact_score(
    admin_conn: AdminConn, pg_memory: MemoryManager, user_id: UUID, weights: RankingWeights
) -> None:
    rng = random.Random(20261122)
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    rows = []
    for i in range(300):
        age = timedelta(seconds=rng.uniform(0, 90 * 86400))  # some beyond the window: recency clamps at 0
        rows.append((i, rng.randint(1, 5), round(rng.uniform(0.6, 1.0), 2), now - age))
    # Exact ties (same importance, confidence and time) are broken the same way by both: newest, then id.
    # (Same category too: the ids are chosen so that i % 6 picks "preference" for all three.)
    rows += [(300 + 6 * k, 4, 0.8, now - timedelta(days=2)) for k in range(3)]
    rows.append((319, 3, 0.9, now + timedelta(hours=1)))  # "after" now (clock skew): recency capped at 1
    # Categories with different half-lives (feedback 90 days ... requirement 365, rejection: not ranked at all):
    # the score is on the decayed confidence.
    categories = ["preference", "requirement", "constraint", "feedback", "goal", "fact"]
    with admin_conn.cursor() as cur:
        cur.executemany(
            "insert into public.user_memory (user_id, kind, category, content, confidence, importance,"
            " content_hash, created_at, last_reinforced_at) values (%s, 'fact', %s, %s, %s, %s, %s, %s, %s)",
            [
                (user_id, categories[i % len(categories)], f"hecho {i}", conf, imp, f"h{i}", ts, ts)
                for i, imp, conf, ts in rows
            ],
        )
    stored = admin_conn.execute(
        "select id, importance, confidence, last_reinforced_at, category from public.user_memory"
        " where user_id = %s and kind = 'fact'",
        (user_id,),
    ).fetchall()
    decay = DecayPolicy()

    def score(r: tuple[Any, ...]) -> float:
        return fact_score(
            importance=r[1],
            confidence=float(r[2]),
            last_reinforced_at=r[3],
            now=now,
            weights=weights,
            category=r[4],
            decay=decay,
        )

    py_score = {r[0]: score(r) for r in stored}
    expected = [r[0] for r in sorted(stored, key=lambda r: (-score(r), -r[3].timestamp(), str(r[0])))]
    # Postgres keeps confidence as `real` (float4), Python computes in float64: scores that are equal on paper
    # (e.g. importance 5/confidence 0.79 vs 3/0.95 once both are older than the recency window) may come out a
    # few 1e-8 apart on either side. The SQL order must be a fact_score order up to that noise.
    noise = 1e-6

    store = pg_memory.store
    records = await store.context(user_id, ContextQuery(max_facts=400, weights=weights, now=now))
    got = [r.id for r in records if r.kind == "fact"]
    assert sorted(got, key=str) == sorted(expected, key=str)
    for higher, lower in itertools.pairwise(got):
        assert py_score[higher] >= py_score[lower] - noise, (higher, lower)
    strict_pairs = [
        (a, b) for i, a in enumerate(expected) for b in expected[i + 1 :] if py_score[a] > py_score[b] + noise
    ]
    assert len(strict_pairs) > 1000  # the comparison is not vacuous
    assert len({r[4] for r in stored}) == len(categories)
    position = {fid: i for i, fid in enumerate(got)}
    assert all(position[a] < position[b] for a, b in strict_pairs)
    # Facts identical in importance, confidence and time: newest first, then by id, in both.
    tied = [
        r[0]
        for r in stored
        if r[1] == 4 and float(r[2]) == 0.8 and r[3] == now - timedelta(days=2) and r[4] == "preference"
    ]
    assert len(tied) == 3
    assert [fid for fid in got if fid in tied] == sorted(tied, key=str)

    # Small limits make the per-importance-level shortcut for facts older than the window bind.
    for limit in (1, 2, 5, 12, 40):
        top = await store.context(user_id, ContextQuery(max_facts=limit, weights=weights, now=now))
        top_ids = [r.id for r in top if r.kind == "fact"]
        assert top_ids == got[:limit]
        assert min(py_score[f] for f in top_ids) >= max(py_score[f] for f in expected if f not in top_ids) - noise


async def test_the_plugins_own_queries_run_under_rls(
    pg_memory: MemoryManager, alice_and_bob: tuple[UUID, UUID]
) -> None:
    """Defence in depth: even a statement that forgets `where user_id = …` sees only the scoped user's rows."""
    alice, bob = alice_and_bob
    store = pg_memory.store
    if isinstance(store, ResilientStore):  # the manager's default wrapper around the PostgresStore
        store = store.primary
    assert isinstance(store, PostgresStore)
    unscoped = "select user_id, content from public.user_memory where user_id = any(%s)"
    rows, _ = await store._run(alice, unscoped, ([alice, bob],))
    assert {r["user_id"] for r in rows} == {alice}
    _, deleted = await store._run(alice, "delete from public.user_memory where user_id = %s", (bob,))
    assert deleted == 0
    role, _ = await store._run(alice, "select current_user as role, auth.uid() as uid", ())
    assert role == [{"role": "authenticated", "uid": alice}]
    # A failing statement rolls the whole message back, identity included.
    with pytest.raises(StoreError, match="division by zero"):
        await store._run(alice, "select 1 / 0", ())
    # The settings are transaction-local: the same pooled connection is back to its own role afterwards.
    rows, _ = await store._run(None, unscoped, ([alice, bob],))
    assert {r["user_id"] for r in rows} == {alice, bob}
    assert (await store._run(None, "select current_setting('request.jwt.claims', true) as c", ()))[0][0]["c"] in (
        None,
        "",
    )


# --- validity over time ----------------------------------------------------------------------------------------------


async def test_invalid_archived_and_expired_facts_never_reach_the_context_but_stay_stored(
    pg_memory: MemoryManager, user_id: UUID, admin_conn: AdminConn
) -> None:
    now = datetime.now(UTC)
    facts = [fact(f"Hecho {name}", importance=5) for name in ("vigente", "invalidado", "archivado", "caducado")]
    payload = json.loads(items_json(*facts))
    payload[3]["expires_at"] = (now - timedelta(minutes=1)).isoformat()
    payload.append(
        {
            **json.loads(items_json(fact("Viaje este fin de semana")))[0],
            "expires_at": (now + timedelta(days=2)).isoformat(),
        }
    )
    admin_conn.execute(f"select * from {UPSERT_FN.split('(')[0]}(%s, %s::jsonb, 0.1)", (user_id, json.dumps(payload)))
    admin_conn.execute(
        "update public.user_memory set invalid_at = now(),"
        " superseded_by = (select id from public.user_memory where user_id = %s and content = 'Hecho vigente')"
        " where user_id = %s and content = 'Hecho invalidado'",
        (user_id, user_id),
    )
    admin_conn.execute(
        "update public.user_memory set archived_at = now() where user_id = %s and content = 'Hecho archivado'",
        (user_id,),
    )

    ctx = await pg_memory.get_memory_context("s-valid", user_id)

    assert sorted(f.content for f in ctx.long_term.facts) == ["Hecho vigente", "Viaje este fin de semana"]
    assert len(await pg_memory.list_memory(user_id)) == 5  # history is kept

    # Stated again, an invalidated fact holds again.
    admin_upsert(admin_conn, user_id, fact("Hecho invalidado", importance=5))
    ctx = await pg_memory.get_memory_context("s-valid", user_id)
    assert "Hecho invalidado" in {f.content for f in ctx.long_term.facts}
