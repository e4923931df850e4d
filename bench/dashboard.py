"""The dashboard's main page for users of growing size: time to answer and page size.

    python -m bench.dashboard                 # users with 10, 100, 1,000 and 10,000 facts (and 100 chats)
    python -m bench.dashboard --facts 100 1000

Rows are written by SQL (`bench.export`'s fill); the page is asked in-process (httpx's ASGI transport, no
network) as the user, so the time is the server's: the reads under RLS and the rendering. Median of 5.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any
from uuid import uuid4

import httpx
import jwt
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai import Embedder
from pydantic_ai.embeddings import TestEmbeddingModel
from rich.console import Console

from bench.embedded import migrated_database
from bench.export import fill
from bench.tables import BenchTable, render
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.dashboard import add_dashboard
from memory_plugin.embeddings import EMBEDDING_DIMENSIONS, MemoryEmbedder
from memory_plugin.store.postgres import PostgresStore

SECRET = "bench-dashboard-secret-with-32-bytes-at-least"
RUNS = 5


async def run(url: str, sizes: list[int], chats: int) -> BenchTable:
    """One row per user size."""
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    embedder = MemoryEmbedder(Embedder(TestEmbeddingModel(dimensions=EMBEDDING_DIMENSIONS)), name="bench")
    services = ApiServices(
        chats=ChatService(PostgresChatStore(pool), embedder), verifier=TokenVerifier(secret=SECRET),
        memory=PostgresStore(pool),
    )  # fmt: skip
    app = create_app(services)
    add_dashboard(app, services, pool)
    table = BenchTable(
        key="dashboard",
        title=f"GET /dashboard (in-process, median of {RUNS}); each user also has {chats} chats",
        columns=["facts", "ms", "page kB", "facts shown"],
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        for facts in sizes:
            user = uuid4()
            await fill(url, user, facts, chats)
            claims = {"sub": str(user), "role": "authenticated", "aud": "authenticated", "exp": int(time.time()) + 600}
            client.cookies.set("memory_dashboard", jwt.encode(claims, SECRET, "HS256"))
            timings: list[float] = []
            size = shown = 0
            for _ in range(RUNS):
                started = time.perf_counter()
                response = await client.get("/dashboard")
                timings.append(time.perf_counter() - started)
                size, shown = len(response.content), response.text.count("/correct")
            ms = statistics.median(timings) * 1000
            table.rows.append([f"{facts:,}", f"{ms:.0f}", f"{size / 1000:.0f}", f"{shown:,}"])
    await pool.close()
    return table


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facts", type=int, nargs="+", default=[10, 100, 1_000, 10_000])
    ap.add_argument("--chats", type=int, default=100)
    args = ap.parse_args(argv)
    with migrated_database("dashboard-bench-") as url:
        render([asyncio.run(run(url, args.facts, args.chats))], Console())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
