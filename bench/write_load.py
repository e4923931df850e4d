"""Facts for the write-scaling benchmark, and a bulk loader that stores them as the write path would.

`bench_fact(i)` is the i-th of ~3 million distinct short Spanish facts built from six word lists: they share a
category and a near-duplicate guard (no numbers, no named values) and most of their trigrams, the hard case for
the near-duplicate probe. A few of them count as near-duplicates of others (under 1 % of the first 10,000).

`bulk_load` writes facts with one `INSERT … SELECT` per 5,000 rows as the database owner: the same columns and
keys the write path computes (`items_from_update`: hash, slot, match key, guard and words), the same triggers
(search rows, postings, counts), the same timestamps (created and last reinforced when the fact was stated), with
the optional vectors set by `memory_set_embeddings`, then an ANALYZE. What differs from the write path, compared on
2,000 facts: the rules a write applies against stored rows (repeats, near-duplicates, slots) are skipped, so the
facts that are near-duplicates of earlier ones stay rows of their own (2,000 rows against 1,986); as the owner
(the service path), the write-rate bucket is not charged; and the write path leaves statistics to autovacuum.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from uuid import UUID

import psycopg

from memory_plugin.models import MemorizedFact
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


_INSERT_SQL = """
insert into public.user_memory (
    user_id, kind, category, content, confidence, source, importance, source_message_ids, session_id,
    attributes, content_hash, created_at, last_reinforced_at, occurred_at, expires_at, metadata, slot, match_key,
    match_guard, match_words)
select %s, i.kind, i.category, i.content, i.confidence, i.source, i.importance,
       coalesce(i.source_message_ids, '{}'), i.session_id, coalesce(i.attributes, '{}'), i.content_hash,
       coalesce(i.occurred_at, now()), coalesce(i.occurred_at, now()),
       i.occurred_at, i.expires_at, coalesce(i.metadata, '{}'), i.slot, i.match_key, i.match_guard, i.match_words
  from jsonb_to_recordset(%s::jsonb) as i(
      kind text, category text, content text, confidence real, source text, importance smallint,
      source_message_ids text[], session_id text, attributes jsonb, content_hash text, occurred_at timestamptz,
      expires_at timestamptz, metadata jsonb, slot text, match_key text, match_guard text, match_words text[])
"""
_EMBED_SQL = "select public.memory_set_embeddings(%s, %s, %s::jsonb)"


def bulk_load(
    conn: psycopg.Connection[tuple[object, ...]],
    user_id: UUID,
    facts: Sequence[MemorizedFact],
    *,
    vectors: Sequence[Sequence[float]] | None = None,
    model: str | None = None,
    chunk: int = 5_000,
) -> None:
    """Store `facts` for `user_id` as the database owner (see the module's docstring); with `vectors` (one per
    fact) and `model`, their embeddings too. `conn` must be in autocommit mode."""
    for start in range(0, len(facts), chunk):
        items = items_from_update(facts[start : start + chunk], None, None, [], None)
        payload = [item.as_json() for item in items]
        conn.execute(_INSERT_SQL, (user_id, json.dumps(payload, ensure_ascii=False)))
        if vectors is not None and model is not None:
            embedded = [
                {"content_hash": item.content_hash, "content": item.content, "embedding": list(vector)}
                for item, vector in zip(items, vectors[start : start + chunk], strict=True)
            ]
            conn.execute(_EMBED_SQL, (user_id, model, json.dumps(embedded)))
    conn.execute("analyze public.user_memory")
