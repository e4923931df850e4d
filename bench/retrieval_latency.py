"""Search latency at scale: `search` and `get_memory_context(query=…)` for one user with 1k, 10k and 100k
facts, with 200k rows of other users in the same table; query embedding timed separately; end to end with the
offline model on a LoCoMo-size user; and the query plans (HNSW, btree postings) checked, as the user (RLS).

    python -m bench.retrieval_latency [--other-rows 200000] [--sizes 1000,10000,100000] [--calls 200]

Runs on its own embedded PostgreSQL in a temporary directory (or `MEMORY_DATABASE_URL`, which it fills with
bench users). Facts have synthetic text (6–15 words drawn log-uniformly from ranks 100–5,000 of a vocabulary:
the first 100 ranks are the stop words full-text search drops; the most common word left is in ~2 % of facts,
like a common content word in a real history) and random unit vectors (the model is irrelevant to latency).
They are loaded in bulk as the superuser (the trigger that maintains `memory_search_docs` is replaced by one
INSERT … SELECT, and the HNSW index is built once after the load, as `CREATE INDEX` does it far faster than
row by row); searches then run exactly as the application runs them (`MemoryManager`, RLS prelude, one round
trip). Prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import psycopg
from pydantic import SecretStr
from pydantic_ai import Embedder
from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType

from bench.tables import percentile
from memory_plugin import MemoryManager, MemorySettings, Note
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.migrations import migrate
from memory_plugin.embeddings import EMBEDDING_DIMENSIONS, MemoryEmbedder, local_available, local_embedder

__all__ = ["main"]

MODEL = "bench-random"
VOCABULARY = 5000

# Facts of every user: synthetic sentences and random unit vectors, generated in SQL (no Python round trips),
# written in time order as the application writes them: each user's facts spread over the same 400 days, all
# users interleaved, a session's 20 facts consecutive in its user's timeline. (Until 2026-11-23 each user's
# facts had random dates and their search rows were written in date order, which scattered every session over
# the table: no write path does that, and it made each neighbour lookup a random page.)
LOAD_FACTS_SQL = """
insert into public.user_memory (id, user_id, kind, category, content, confidence, importance, content_hash,
                                created_at, last_reinforced_at, occurred_at, metadata, session_id)
select gen_random_uuid(), u.user_id, 'fact', 'fact',
       (select string_agg('w' || floor(100 * exp(random() * ln(%(vocab)s / 100.0)))::int, ' ')
          from generate_series(1, 6 + (g %% 10)) where g > 0),
       0.6 + random() * 0.4, 1 + (g %% 5), md5(u.user_id::text || g), t.at, t.at, t.at,
       jsonb_build_object('speaker', case when g %% 2 = 0 then 'Ana' else 'Luis' end),
       'session-' || (g / 20)
  from unnest(%(users)s::uuid[], %(counts)s::integer[]) as u(user_id, n),
       generate_series(1, u.n) as g,
       lateral (select now() - interval '400 days' * (1 - g::float8 / u.n) as at) as t
 order by t.at
"""
LOAD_DOCS_SQL = """
insert into public.memory_search_docs (memory_id, user_id, session_id, content, speaker, embedding, embedding_model,
                                       embedded_at, prev_memory_id, seq)
select m.id, m.user_id, m.session_id, m.content, lower(m.metadata ->> 'speaker'),
       (select extensions.l2_normalize(array_agg(random() - 0.5)::extensions.vector)::extensions.halfvec
          from generate_series(1, 384) where m.id is not null),
       %(model)s, now(), lag(m.id) over (partition by m.user_id, m.session_id order by m.created_at, m.id),
       coalesce((select c.last_seq from memory_private.memory_search_counts c where c.user_id = m.user_id), 0)
       + row_number() over (partition by m.user_id order by m.created_at, m.id)
  from public.user_memory m where m.user_id = any(%(users)s) and m.kind = 'fact'
 order by m.created_at
"""
# The row count and insertion counter per user that the count trigger keeps, in one statement instead of one
# upsert per row.
COUNT_DOCS_SQL = """
insert into memory_private.memory_search_counts as c (user_id, docs, last_seq, search_partition)
select d.user_id, count(*), max(d.seq), min(d.tableoid)::regclass from public.memory_search_docs d
 where d.user_id = any(%(users)s) group by d.user_id
    on conflict (user_id) do update set docs = c.docs + excluded.docs, search_partition = excluded.search_partition,
                                        last_seq = greatest(c.last_seq, excluded.last_seq)
"""
# The HNSW index is dropped for the load and rebuilt by its own definition (whatever the migrations made it).
HNSW_INDEX = "public.memory_search_docs_embedding_idx"


def _unit(rng: random.Random) -> tuple[float, ...]:
    v = [rng.gauss(0, 1) for _ in range(EMBEDDING_DIMENSIONS)]
    norm = math.sqrt(sum(x * x for x in v))
    return tuple(x / norm for x in v)


class RandomEmbeddingModel(EmbeddingModel):
    """Random unit vectors, instantly: latency of the database path alone. A pool of vectors drawn once and
    handed out in turn (drawing 384 Gaussians in Python took ~0.5 ms, which was inside every timed search)."""

    def __init__(self, seed: int = 7, pool: int = 512) -> None:
        super().__init__()
        rng = random.Random(seed)
        self._pool = [list(_unit(rng)) for _ in range(pool)]
        self._next = 0

    def _vector(self) -> list[float]:
        self._next = (self._next + 1) % len(self._pool)
        return self._pool[self._next]

    @property
    def model_name(self) -> str:
        return MODEL

    @property
    def system(self) -> str:
        return "bench"

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        return EmbeddingResult(
            embeddings=[self._vector() for _ in texts],
            inputs=texts,
            input_type=input_type,
            model_name=MODEL,
            provider_name="bench",
        )


def _question(rng: random.Random) -> str:
    words = [f"w{math.floor(100 * math.exp(rng.random() * math.log(VOCABULARY / 100)))}" for _ in range(4)]
    return "What did Ana say about " + " ".join(words) + "?"


def _load(url: str, users: dict[uuid.UUID, int], echo: bool = True) -> float:
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("alter table public.user_memory disable trigger user_memory_search_docs_sync")
        conn.execute("alter table public.memory_search_docs disable trigger memory_search_docs_count_added")
        found = conn.execute("select pg_get_indexdef(to_regclass(%s))", (HNSW_INDEX,)).fetchone()
        if not found or not found[0]:
            raise RuntimeError(f"{HNSW_INDEX} is missing (an interrupted earlier run?): migrate a new database")
        # On a partitioned table pg_get_indexdef says `ON ONLY`, which would build the parent's index alone.
        hnsw_sql = str(found[0]).replace(" ON ONLY ", " ON ", 1)
        conn.execute(f"drop index {HNSW_INDEX}")
        conn.execute(LOAD_FACTS_SQL, {"users": list(users), "counts": list(users.values()), "vocab": VOCABULARY})
        conn.execute(LOAD_DOCS_SQL, {"users": list(users), "model": MODEL})
        conn.execute("alter table public.user_memory enable trigger user_memory_search_docs_sync")
        conn.execute("alter table public.memory_search_docs enable trigger memory_search_docs_count_added")
        conn.execute(COUNT_DOCS_SQL, {"users": list(users)})
        if echo:
            print(f"  loaded {sum(users.values()):,} facts in {time.perf_counter() - started:.0f} s; building HNSW…")
        conn.execute("set maintenance_work_mem = '512MB'")
        conn.execute(hnsw_sql)
        conn.execute("vacuum analyze public.user_memory")
        conn.execute("vacuum analyze public.memory_search_docs")
        # Write the load's dirty pages now, not while the first users are being timed.
        conn.execute("checkpoint")
    return time.perf_counter() - started


def _plans(url: str, user: uuid.UUID, vector: tuple[float, ...], question: str) -> tuple[str, str]:
    """The index each candidate channel of memory_search used for `user`: the plans the function itself ran
    (auto_explain of its nested statements), as the user, under row-level security."""
    literal = "[" + ",".join(map(repr, vector)) + "]"
    notices: list[str] = []
    with psycopg.connect(url) as conn:
        conn.add_notice_handler(lambda n: notices.append(n.message_primary or ""))
        conn.execute("load 'auto_explain'")
        for name, value in [("log_min_duration", "0"), ("log_nested_statements", "on"), ("log_level", "notice")]:
            conn.execute(f"set auto_explain.{name} = '{value}'")
        conn.execute("select set_config('role', 'authenticated', true), set_config('request.jwt.claims', %s, true)",
                     (json.dumps({"sub": str(user), "role": "authenticated"}),))  # fmt: skip
        conn.execute("select * from public.memory_search(%s, %s, %s::extensions.vector, %s)",
                     (user, question, literal, MODEL)).fetchall()  # fmt: skip
        conn.rollback()
    # The vector statement (exact or HNSW) is the one that aggregates `x.memory_id`.
    vector_log = next((n for n in notices if "array_agg(x.memory_id)" in n), "")
    text = next((n for n in notices if "with bm25 as" in n), "")
    if "_embedding_idx" in vector_log:
        vec_plan = "HNSW (the user's partition)"
    elif "Seq Scan" in vector_log:
        vec_plan = "exact: sequential scan of the partition"
    elif "_user_id_embedding_model" in vector_log:
        how = "index only" if "Index Only Scan" in vector_log else "and the table"
        vec_plan = f"exact: the user's vectors from the (user_id, embedding_model) index, {how}"
    elif found := re.search(r"Index (?:Only )?Scan (?:using|on) memory_search_docs_p\d+_(\w+)", vector_log):
        vec_plan = f"exact: the user's rows by index ({found.group(1)}) and the table"
    else:
        vec_plan = "other: " + (vector_log.splitlines()[-1][:60] if vector_log else "not found")
    txt_plan = "btree postings (user_id, lexeme), index only" if "memory_search_terms_pkey" in text else "other"
    return vec_plan, txt_plan


Op = Callable[[int], Awaitable[object]]
K = TypeVar("K")


async def _time(calls: int, op: Op) -> list[float]:
    return (await _time_each(calls, {"": op}))[""]


async def _time_each(calls: int, ops: Mapping[K, Op]) -> dict[K, list[float]]:
    """Milliseconds of each of `ops`, called in turn (`calls` rounds after 10 of warm-up), so that every one of
    them meets the same background load of this shared machine: their ratios are measured side by side."""
    out: dict[K, list[float]] = {key: [] for key in ops}
    for i in range(calls + 10):
        for key, op in ops.items():
            t0 = time.perf_counter()
            await op(i)
            if i >= 10:  # warm-up
                out[key].append((time.perf_counter() - t0) * 1000)
    return out


_PARTITION_SQL = (
    "select r from generate_series(0, %(m)s - 1) as r"
    " where satisfies_hash_partition('public.memory_search_docs'::regclass, %(m)s, r, %(u)s::uuid)"
)


def _users_by_partition(url: str, count: int, mate_of: int | None = None) -> list[uuid.UUID]:
    """`count` new user ids in distinct partitions of memory_search_docs, then one more in the partition of the
    `mate_of`-th (so that sizes are compared user against user, and sharing a partition is its own row)."""
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "select count(*) from pg_inherits where inhparent = 'public.memory_search_docs'::regclass"
        ).fetchone()
        modulus = int(found[0]) if found else 16

        def remainder(user: uuid.UUID) -> int:
            row = conn.execute(_PARTITION_SQL, {"m": modulus, "u": user}).fetchone()
            return int(row[0]) if row else -1

        users: dict[int, uuid.UUID] = {}
        while len(users) < min(count, modulus):
            user = uuid.uuid4()
            users.setdefault(remainder(user), user)
        chosen = list(users.values())
        if mate_of is not None:
            wanted = remainder(chosen[mate_of])
            while remainder(user := uuid.uuid4()) != wanted:
                pass
            chosen.append(user)
    return chosen


async def _bench(url: str, sizes: list[int], other_rows: int, calls: int) -> None:
    rng = random.Random(11)
    # Each user in a partition of their own, plus a user sharing the largest one's partition (as users do, by
    # hash, once there are many): the vector channel's cost follows a user's share of their partition
    # (supabase/schemas/22_memory_search.sql).
    largest = sizes.index(max(sizes))
    ids = _users_by_partition(url, len(sizes), mate_of=largest if len(sizes) > 1 else None)
    targets = dict(zip(ids, sizes, strict=False))
    crowded = {ids[-1]: sorted(sizes)[len(sizes) // 2]} if len(sizes) > 1 else {}
    labels = {u: f"{n:,}" for u, n in targets.items()}
    labels.update({u: f"{n:,}, in the {max(sizes):,}-fact user's partition" for u, n in crowded.items()})
    others = {uuid.uuid4(): 100 for _ in range(other_rows // 100)}
    print(f"loading {other_rows:,} rows of {len(others):,} other users and users of {', '.join(labels.values())} …")
    load_s = _load(url, {**others, **targets, **crowded})
    settings = MemorySettings(database_url=SecretStr(url), auto_migrate=False, embedding_model="none")
    emb = MemoryEmbedder(Embedder(RandomEmbeddingModel()), name=MODEL, query_cache_size=0)
    rows = []
    plans = []
    async with MemoryManager.open(settings, embedder=emb) as memory:
        users = list({**targets, **crowded})
        search = await _time_each(calls, {u: lambda i, u=u: memory.search(u, _question(rng), limit=10) for u in users})
        context = await _time_each(
            calls, {u: lambda i, u=u: memory.get_memory_context(f"s{i}", u, query=_question(rng)) for u in users}
        )
        for user in users:
            rows.append((labels[user], search[user], context[user]))
            vec_plan, txt_plan = _plans(url, user, _unit(rng), _question(rng))
            plans.append((labels[user], vec_plan, txt_plan))
    base = rows[0][1]
    with psycopg.connect(url) as conn:
        buffers = conn.execute("show shared_buffers").fetchone()
    print(f"\n(f) search latency, PostgreSQL with shared_buffers {buffers[0] if buffers else '?'}, {other_rows:,} rows "
          f"of other users in the same table (load + index: {load_s:.0f} s); random query vectors, embedding time "
          "excluded\n")  # fmt: skip
    print("| facts of the user | calls | search p50 ms | search p95 ms | get_memory_context(query) p50 ms "
          "| p95 ms | search p95 vs smallest |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for label, search, context in rows:
        growth = percentile(search, 0.95) / percentile(base, 0.95)
        print(f"| {label} | {len(search)} | {percentile(search, 0.50):.2f} | {percentile(search, 0.95):.2f} | "
              f"{percentile(context, 0.50):.2f} | {percentile(context, 0.95):.2f} | {growth:.2f}× |")  # fmt: skip
    print("\n| facts of the user | vector channel plan (as memory_search chose it) | text channel plan |")
    print("|---:|---|---|")
    for label, vec_plan, txt_plan in plans:
        print(f"| {label} | {vec_plan} | {txt_plan} |")


async def _end_to_end(url: str, calls: int) -> None:
    """The offline model end to end on a LoCoMo-size user (700 facts): embedding + search."""
    if not local_available():
        print("\n(the [local] extra is not installed: end-to-end timing with the offline model skipped)")
        return
    rng = random.Random(5)
    settings = MemorySettings(database_url=SecretStr(url), auto_migrate=False, embedding_model="local")
    local = local_embedder()
    async with MemoryManager.open(settings, embedder=local) as memory:
        user = uuid.uuid4()
        topics = ["pottery", "camping", "painting", "adoption", "running", "guitar", "school", "beach", "dogs"]
        notes = [
            Note(
                content=f"{rng.choice(['Ana', 'Luis'])}: I went {rng.choice(topics)} with my "
                f"{rng.choice(['kids', 'friends', 'sister'])} {rng.choice(['yesterday', 'last week', ''])}",
                session_id=f"s{i // 20}",
                metadata={"dia_id": f"D{i // 20}:{i % 20}"},
            )
            for i in range(700)
        ]
        await memory.remember_many(user, notes)
        questions = [f"When did Ana go {rng.choice(topics)} with her {rng.choice(['kids', 'friends'])} {i}?"
                     for i in range(calls + 10)]  # fmt: skip
        embed = await _time(calls, lambda i: local.embed_query(questions[i] + " e"))
        total = await _time(calls, lambda i: memory.search(user, questions[i], limit=10))
    print("\n(g) end to end on a LoCoMo-size user (700 facts), offline all-MiniLM-L6-v2, one thread\n")
    print("| step | p50 ms | p95 ms |\n|---|---:|---:|")
    print(f"| query embedding alone | {percentile(embed, 0.50):.1f} | {percentile(embed, 0.95):.1f} |")
    print(f"| search, embedding included | {percentile(total, 0.50):.1f} | {percentile(total, 0.95):.1f} |")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--other-rows", type=int, default=200_000)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="retrieval-latency-") as tmp:
        env_url = MemorySettings().database_url
        embedded = None
        if env_url is None:
            embedded = EmbeddedPostgres(Path(tmp))
            url = embedded.start()
        else:
            url = env_url.get_secret_value()

        async def run() -> None:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await migrate(conn)
            await _bench(url, sizes, args.other_rows, args.calls)
            await _end_to_end(url, args.calls)

        try:
            asyncio.run(run())
        finally:
            if embedded is not None:
                embedded.stop()
    print(f"\nwhole run: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
