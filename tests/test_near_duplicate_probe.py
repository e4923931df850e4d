"""The near-duplicate probe on PostgreSQL (`memory_private.memory_near_duplicate`): it finds a rewording of a stored
fact among thousands of the user's facts sharing its words, in every direction the word rule allows (the same
words, words dropped, words added), and its plan reads the two word-key indexes, never the user's rows."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from bench.write_load import bench_facts, bulk_load
from memory_plugin import MemorizedFact, MemoryManager, MemorySettings, MemoryUpdate
from memory_plugin.write.items import items_from_update

AdminConn = psycopg.Connection[tuple[Any, ...]]

STORED = "Necesita certificado de material con cada pedido de soportes"
# Reinforce STORED (trigram similarity >= 0.8, no word swapped): the same words, one dropped, one added. The
# last one is found through the stored fact's first word (it has fewer words than the new one).
REWORDINGS = [
    "Necesita certificados de material con cada pedido de soportes",  # 0.96, the same words
    "Necesita certificado de material con cada pedido",  # 0.83, "soportes" dropped
    "Necesita certificado de material con cada pedido de soportes nuevos",  # 0.90, "nuevos" added
]
NOT_A_REWORDING = "Necesita certificado de material en cada pedido de soportes grandes"  # 0.797: a fact of its own
FILLER = 3_000
"""Stored facts of the same category and guard, of other lengths, most sharing words with STORED."""


def _fact(content: str) -> MemorizedFact:
    return MemorizedFact(content=content, category="requirement", confidence=0.9, source="explicit")


def _facts(conn: AdminConn, user: UUID) -> dict[str, int]:
    """The user's current facts (content -> times reinforced)."""
    rows = conn.execute(
        "select content, relevance_count from public.user_memory"
        " where user_id = %s and kind = 'fact' and invalid_at is null",
        (user,),
    ).fetchall()
    return dict(rows)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
async def test_a_rewording_is_found_among_thousands_of_facts_sharing_its_words(
    pg_settings: MemorySettings, admin_conn: AdminConn
) -> None:
    async with MemoryManager.open(pg_settings.model_copy(update={"embedding_model": "none"})) as memory:
        await _reinforce_among_thousands(memory, admin_conn)


async def _reinforce_among_thousands(pg_memory: MemoryManager, admin_conn: AdminConn) -> None:
    """Trigrams only (no embedder, whose own near-duplicate rule would merge more)."""
    user = uuid4()
    bulk_load(admin_conn, user, bench_facts(0, FILLER))
    await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[_fact(STORED)]))
    for content in REWORDINGS:
        await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[_fact(content)]))
    facts = _facts(admin_conn, user)
    assert facts[STORED] == len(REWORDINGS), "every rewording reinforced the stored fact"
    assert not set(REWORDINGS) & set(facts)
    await pg_memory.update_memory(MemoryUpdate(user_id=user, new_facts=[_fact(NOT_A_REWORDING)]))
    assert NOT_A_REWORDING in _facts(admin_conn, user)


def _probe_plans(conn: AdminConn, user: UUID, content: str) -> list[str]:
    """The plans (auto_explain) of the statements one memory_near_duplicate call runs."""
    item = items_from_update([_fact(content)], None, None, [], None)[0]
    plans: list[str] = []
    conn.execute("load 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_analyze = off"):
        conn.execute(f"set auto_explain.{setting}")
    conn.execute("set client_min_messages = log")
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    try:
        conn.execute(
            "select memory_private.memory_near_duplicate(%s, %s, %s, %s, %s, null, 0.8, now())",
            (user, item.category, item.match_guard, item.match_key, list(item.match_words or ())),
        )
    finally:
        conn.execute("reset client_min_messages")
        conn.execute("set auto_explain.log_min_duration = -1")
    return [p for p in plans if "user_memory" in p]


@pytest.mark.parametrize("facts", [0, 2_000])
def test_the_probe_reads_the_word_key_indexes_not_the_users_rows(
    database_url: str, admin_conn: AdminConn, facts: int
) -> None:
    """Whatever the user's size when the connection made its generic plan (none, or 2,000 facts), the probe is
    a BitmapOr of the two word-key indexes: no sequential scan, no scan of another index of user_memory."""
    user = uuid4()
    if facts:
        bulk_load(admin_conn, user, bench_facts(0, facts))
    with psycopg.connect(database_url, autocommit=True) as conn:  # a new connection: a new generic plan
        plans = _probe_plans(conn, user, STORED)
    assert plans, "auto_explain logged the probe's statement"
    plan = "\n".join(plans)
    assert "Bitmap Index Scan on user_memory_fact_words_idx" in plan, plan
    assert "Bitmap Index Scan on user_memory_fact_anchor_idx" in plan, plan
    scans = [ln for ln in plan.splitlines() if "Scan" in ln and "Bitmap" not in ln]
    assert scans == [], json.dumps(scans)
