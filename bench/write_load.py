"""Facts for the write-scaling benchmark, and a bulk loader that stores them as the write path would.

`bench_fact(i)` is the i-th of ~3 million distinct short Spanish facts built from six word lists: they share a
category and a near-duplicate guard (no numbers, no named values) and most of their trigrams, the hard case for
the near-duplicate probe. A few of them count as near-duplicates of others (under 1 % of the first 10,000).

`bulk_load` stores facts as `update_memory` in 200-fact calls would, as the database owner in one statement per
call: the same items (`items_from_update`: hash, slot, match key, guard and words), the same folding within a
call (last value of a slot, near-duplicates, and with vectors paraphrases by meaning), and the same statement
(`memory_upsert_items`, or `memory_upsert_embedded` with vectors): repeats and near-duplicates of stored facts
reinforce them, as through the API (2,000 benchmark facts: 1,986 rows either way, the same contents). What it
skips: the manager around the statement (admission, the write-rate bucket and the facts bound, which the owner is
not charged), and it ends with an ANALYZE (the write path leaves statistics to autovacuum; the timed calls
then do not depend on when autovacuum ran).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from uuid import UUID

import psycopg

from memory_plugin.models import MemorizedFact
from memory_plugin.quality import fold_near_duplicates, fold_semantic_duplicates
from memory_plugin.quality.rules import WriteRules
from memory_plugin.quality.slots import keep_latest_per_slot
from memory_plugin.write.items import items_from_update

__all__ = ["bench_fact", "bench_facts", "bulk_load"]

_WORDS: tuple[tuple[str, ...], ...] = (
    ("cliente", "proveedor", "taller", "almacén", "ingeniero", "comprador", "jefe", "operario", "técnico", "gerente",
     "diseñador", "inspector"),
    ("prefiere", "necesita", "pide", "evita", "compra", "revisa", "usa", "recibe", "envía", "valida", "mide", "corta"),
    ("soportes", "bridas", "tornillos", "placas", "ejes", "perfiles", "tubos", "chapas", "juntas", "tuercas",
     "muelles", "poleas"),
    ("rojos", "negros", "azules", "gruesos", "finos", "pulidos", "anodizados", "templados", "ligeros", "robustos",
     "baratos", "rápidos"),
    ("montaje", "exportación", "prototipos", "reparaciones", "pedidos", "catálogo", "ferias", "pruebas", "garantía",
     "mantenimiento", "obras", "clientes"),
    ("montaje", "exportación", "prototipos", "reparaciones", "pedidos", "catálogo", "ferias", "pruebas", "garantía",
     "mantenimiento", "obras", "clientes"),
)  # fmt: skip


def bench_fact(i: int) -> str:
    """The i-th benchmark fact (distinct for every i below 12**6)."""
    words = []
    for choices in _WORDS:
        i, k = divmod(i, len(choices))
        words.append(choices[k])
    return f"El {words[0]} {words[1]} {words[2]} {words[3]} para {words[4]} y {words[5]}"


def bench_facts(start: int, count: int) -> list[MemorizedFact]:
    """Facts `start` … `start + count - 1` as `MemorizedFact`s (explicit, confidence 0.9)."""
    return [
        MemorizedFact(content=bench_fact(i), category="requirement", confidence=0.9, source="explicit")
        for i in range(start, start + count)
    ]


_UPSERT_SQL = "select count(*) from public.memory_upsert_items(%s, %s::jsonb, %s::real, null, %s::real)"
_UPSERT_EMBEDDED_SQL = (
    "select count(*) from public.memory_upsert_embedded(%s, %s::jsonb, %s::real, null, %s::real, %s, %s::real)"
)
_RULES = WriteRules()


def bulk_load(
    conn: psycopg.Connection[tuple[object, ...]],
    user_id: UUID,
    facts: Sequence[MemorizedFact],
    *,
    vectors: Sequence[Sequence[float]] | None = None,
    model: str | None = None,
    batch: int = 200,
) -> None:
    """Store `facts` for `user_id` as the database owner, as `update_memory` calls of `batch` facts would (see the
    module's docstring); with `vectors` (one per fact) and `model`, as a manager with that embedder would.
    `conn` must be in autocommit mode (each call its own transaction, as through the API)."""
    rules = _RULES
    for start in range(0, len(facts), batch):
        items = items_from_update(facts[start : start + batch], None, None, [], None)
        if vectors is not None and model is not None:
            chunk = vectors[start : start + batch]
            items = [replace(i, embedding=tuple(v), embedding_model=model) for i, v in zip(items, chunk, strict=True)]
        items, _ = keep_latest_per_slot(items)
        items, _ = fold_near_duplicates(items, rules.near_duplicate_threshold)
        if vectors is not None and model is not None:
            items, _ = fold_semantic_duplicates(items, rules.embedding_threshold)
            payload = json.dumps([i.as_json() for i in items], ensure_ascii=False)
            conn.execute(
                _UPSERT_EMBEDDED_SQL,
                (user_id, payload, rules.reinforcement_step, rules.near_duplicate_threshold, model,
                 rules.embedding_threshold),
            )  # fmt: skip
        else:
            payload = json.dumps([i.as_json() for i in items], ensure_ascii=False)
            conn.execute(_UPSERT_SQL, (user_id, payload, rules.reinforcement_step, rules.near_duplicate_threshold))
    conn.execute("analyze public.user_memory")
