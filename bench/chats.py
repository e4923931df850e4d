"""Chats over the REST API: PATCH latency while a chat grows to 1,000 turns (compaction included), the
model-visible history against the full one, `GET /api/chats?search=` throughput with 32 concurrent clients,
pydantic-ai's `ConversationStore` on Postgres (save/load while a conversation grows), and the short-term session
backends (RAM, Postgres, and Redis with `--redis-url`).

    .venv/bin/python -m bench.chats            # 1,000 turns, 200 chats to search, 10 s of searching
    .venv/bin/python -m bench.chats --quick    # 200 turns, 50 chats, 3 s

Starts its own embedded PostgreSQL in a temporary directory and uvicorn on 127.0.0.1 (a free port), in this
process. Embeddings come from pydantic-ai's `TestEmbeddingModel` (no model cost: this measures the API, the
database and compaction; a real embedding model adds its own latency per summary and per search); summaries
are the offline extractive ones. Tokens are estimated as characters / 4 of the turns' text.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
import uuid
from typing import Any

import httpx
import jwt
import psycopg
import uvicorn
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai import Agent, Embedder
from pydantic_ai.conversation import Conversation
from pydantic_ai.embeddings import TestEmbeddingModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import UsageLimits

from bench.embedded import migrated_database
from bench.tables import percentile
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.chats.compaction import turn_text
from memory_plugin.chats.conversations import PostgresConversationStore
from memory_plugin.chats.service import from_json
from memory_plugin.embeddings import EMBEDDING_DIMENSIONS, MemoryEmbedder
from memory_plugin.models import Message
from memory_plugin.session import SessionBackend, SessionStore
from memory_plugin.session.postgres_store import PostgresSessionStore
from memory_plugin.session.redis_store import RedisSessionStore

SECRET = "bench-secret-with-at-least-32-bytes-of-entropy"
TOPICS = ["soportes anodizados", "bridas de acero", "facturas pendientes", "tornillería M8", "plazos de entrega"]


def _headers(user: uuid.UUID) -> dict[str, str]:
    claims = {"sub": str(user), "role": "authenticated", "aud": "authenticated", "exp": int(time.time()) + 3600}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, 'HS256')}"}


def _turns(start: int, pairs: int, topic: str) -> list[dict[str, str]]:
    out = []
    for i in range(start, start + pairs):
        out += [
            {"role": "user", "content": f"Sobre {topic}: necesito el detalle número {i} con sus medidas y el plazo."},
            {"role": "assistant", "content": f"Anotado el detalle {i} de {topic}: medidas estándar, plazo de 5 días."},
        ]
    return out


def _tokens(history: list[dict[str, Any]]) -> int:
    return sum(len(turn_text(m)) for m in from_json(history)) // 4


async def _patch_latency(client: httpx.AsyncClient, turns: int) -> None:
    user = uuid.uuid4()
    chat = (await client.post("/api/chats", json={}, headers=_headers(user))).json()
    latencies = []
    body: dict[str, Any] = {}
    for start in range(0, turns // 2):
        began = time.perf_counter()
        response = await client.patch(
            f"/api/chats/{chat['id']}", json={"turns": _turns(start, 1, TOPICS[start * 5 // (turns // 2)])},
            headers=_headers(user),
        )  # fmt: skip
        latencies.append((time.perf_counter() - began) * 1000)
        response.raise_for_status()
    # A PATCH answers with what it appended: the histories are read once at the end.
    body = (await client.get(f"/api/chats/{chat['id']}", headers=_headers(user))).json()
    full, visible = _tokens(body["full_history"]), _tokens(body["assistant_history"])
    print(f"## PATCH /api/chats/{{id}}: a chat grown to {turns} turns, 2 turns per request\n")
    print("| measure | result |\n|---|---:|")
    p50, p95 = percentile(latencies, 0.5), percentile(latencies, 0.95)
    print(f"| PATCH p50 / p95 / max | {p50:.1f} / {p95:.1f} / {max(latencies):.1f} ms |")
    print(f"| turns: full history / model-visible | {len(body['full_history'])} / {len(body['assistant_history'])} |")
    print(f"| tokens (chars/4): full history / model-visible | {full:,} / {visible:,} ({visible / full:.1%}) |")
    print()


async def _search_throughput(client: httpx.AsyncClient, chats: int, seconds: float, clients: int) -> None:
    user = uuid.uuid4()
    for i in range(chats):
        topic = f"{TOPICS[i % len(TOPICS)]} lote {i}"
        await client.post("/api/chats", json={"turns": _turns(0, 2, topic)}, headers=_headers(user))
    headers = _headers(user)
    done = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(n: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            query = f"volvamos al chat de {TOPICS[(n + done) % len(TOPICS)]}"
            response = await client.get("/api/chats", params={"search": query}, headers=headers)
            response.raise_for_status()
            latencies.append((time.perf_counter() - began) * 1000)
            done += 1

    began = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(clients)))
    elapsed = time.perf_counter() - began
    print(f"## GET /api/chats?search=: {clients} concurrent clients, a user with {chats} chats, {seconds:.0f} s\n")
    print("| measure | result |\n|---|---:|")
    print(f"| requests/s | {done / elapsed:.0f} |")
    print(f"| latency p50 / p95 | {percentile(latencies, 0.5):.1f} / {percentile(latencies, 0.95):.1f} ms |")
    print()


def _session_latency(url: str, calls: int, redis_url: str | None = None) -> None:
    """`add_message` and `snapshot` on one session, RAM vs Postgres (vs Redis, given its URL; same host)."""
    print(f"## Short-term sessions: {calls} `add_message` then {calls} `snapshot` calls, window of 20\n")
    print("| backend | add_message p50 / p95 | snapshot p50 / p95 |\n|---|---:|---:|")
    postgres = PostgresSessionStore.connect(url, max_messages=20)
    backends: dict[str, SessionBackend] = {"memory (RAM)": SessionStore(max_messages=20), "postgres": postgres}
    if redis_url is not None:
        backends["redis"] = RedisSessionStore.connect(redis_url, prefix=f"bench-{uuid.uuid4().hex}", max_messages=20)
    for name, backend in backends.items():
        user, session = uuid.uuid4(), f"bench-{uuid.uuid4().hex}"
        writes, reads = [], []
        for i in range(calls):
            began = time.perf_counter()
            backend.add_message(session, Message(role="user", content=f"mensaje {i} sobre soportes"), user_id=user)
            writes.append((time.perf_counter() - began) * 1000)
        for _ in range(calls):
            began = time.perf_counter()
            backend.snapshot(session, user_id=user)
            reads.append((time.perf_counter() - began) * 1000)
        w = f"{percentile(writes, 0.5):.3f} / {percentile(writes, 0.95):.3f} ms"
        r = f"{percentile(reads, 0.5):.3f} / {percentile(reads, 0.95):.3f} ms"
        print(f"| {name} | {w} | {r} |")
    for backend in backends.values():
        close = getattr(backend, "close", None)  # the networked backends' connections
        if callable(close):
            close()
    print()


async def _conversation_latency(url: str, turns: int) -> None:
    """pydantic-ai's `ConversationStore` on Postgres: `load` + agent run + `save` per turn as the conversation
    grows, then loading the whole history and a window of it."""
    print(f"## ConversationStore on Postgres: a conversation growing to {2 * turns:,} messages\n")
    async with AsyncConnectionPool(url, min_size=2, kwargs={"autocommit": True, "row_factory": dict_row}) as pool:
        store = PostgresConversationStore(pool, uuid.uuid4())
        agent = Agent(TestModel(custom_output_text="Anodizado tipo II, 20 micras, entrega en 3 semanas."))
        loads, saves = [], []
        for i in range(turns):
            began = time.perf_counter()
            conversation = await store.load("bench") or Conversation(conversation_id="bench")
            loads.append((time.perf_counter() - began) * 1000)
            result = await agent.run(
                f"pregunta {i} sobre los soportes",
                conversation=conversation,
                usage_limits=UsageLimits(request_limit=None),
            )
            began = time.perf_counter()
            await store.save(result)
            saves.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        whole = await store.load("bench")
        load_all = (time.perf_counter() - began) * 1000
        began = time.perf_counter()
        await store.load("bench", limit=20)
        load_window = (time.perf_counter() - began) * 1000
    messages = len(whole.messages) if whole is not None else 0
    print("| measure | result |\n|---|---:|")
    save = f"{percentile(saves, 0.5):.1f} / {percentile(saves, 0.95):.1f}"
    print(f"| `save` (the turn's 2 new messages) p50 / p95 | {save} ms |")
    print(f"| `load` while growing p50 / p95 | {percentile(loads, 0.5):.1f} / {percentile(loads, 0.95):.1f} ms |")
    print(
        f"| `load` of all {messages:,} messages / of the last 20 (`limit=20`) | {load_all:.1f} / {load_window:.1f} ms |"
    )
    print()


async def _bench(url: str, turns: int, chats: int, seconds: float) -> None:
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        url, min_size=4, max_size=16, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    embedder = MemoryEmbedder(Embedder(TestEmbeddingModel(dimensions=EMBEDDING_DIMENSIONS)), name="bench")
    services = ApiServices(ChatService(PostgresChatStore(pool), embedder), TokenVerifier(secret=SECRET))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(services, rate_per_second=0)  # measures the server, not the per-user rate limit
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    for _ in range(1500):
        if server.started:
            break
        await asyncio.sleep(0.02)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits) as client:
        await _patch_latency(client, turns)
        await _search_throughput(client, chats, seconds, clients=32)
    await _conversation_latency(url, turns // 2)
    server.should_exit = True
    await task
    await pool.close()


def main() -> None:
    """Run the chat benchmark and print markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--redis-url", help="also measure the Redis session backend on this server")
    args = parser.parse_args()
    turns, chats, seconds = (200, 50, 3.0) if args.quick else (1000, 200, 10.0)
    with migrated_database("memory-plugin-bench-") as url:

        async def run() -> None:
            await _bench(url, turns, chats, seconds)
            await asyncio.to_thread(_session_latency, url, 200 if args.quick else 2000, args.redis_url)

        asyncio.run(run())


if __name__ == "__main__":
    main()
