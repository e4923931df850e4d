"""The price of idempotent chat appends: the append statement alone, while three chats grow to 1,000 turns
(2 turns per append), as a bare `UPDATE` (the statement before `public.chat_append`), as `chat_append`
without a key, and as `chat_append` with an idempotency key (a key row written, the chat's 100 newest kept).
The three are interleaved step by step, so a busy machine slows them alike.

    .venv/bin/python -m bench.chat_append            # 1,000 turns
    .venv/bin/python -m bench.chat_append --quick    # 200 turns

Starts its own embedded PostgreSQL in a temporary directory; runs as one user under RLS, as the API does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.embedded import migrated
from bench.tables import percentile
from memory_plugin.chats.postgres import _COLUMNS, APPEND_SQL, CREATE_SQL
from memory_plugin.database.calls import IDENTITY_PRELUDE_SQL, run_after_prelude, user_claims

# The append before `chat_append` (one UPDATE returning the chat, the same columns), kept as the baseline.
BARE_UPDATE_SQL = (
    "update public.chats set full_history = full_history || %s::jsonb,"
    " assistant_history = assistant_history || %s::jsonb, turn_count = turn_count + %s, last_activity_at = now()"
    f" where user_id = %s and id = %s returning {_COLUMNS}"
)


def _turns(i: int) -> str:
    return json.dumps(
        [
            {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": f"¿Qué espesor lleva el lote {i}?"}]},
            {"kind": "response", "parts": [{"part_kind": "text", "content": f"El lote {i} lleva 20 micras."}]},
        ]
    )


async def _run(url: str, turns: int) -> dict[str, list[float]]:
    user = uuid.uuid4()
    timings: dict[str, list[float]] = {"bare UPDATE": [], "chat_append, no key": [], "chat_append, with a key": []}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:

        async def run(query: str, params: tuple[Any, ...]) -> list[Any]:
            rows, _ = await run_after_prelude(conn, IDENTITY_PRELUDE_SQL, (user_claims(user),), query, params)
            return rows

        chats = {}
        for name in timings:
            chats[name] = (await run(CREATE_SQL, (user, name, True, "[]", "[]", 0)))[0]["id"]
        for i in range(turns // 2):
            payload = _turns(i)
            for name, chat in chats.items():
                if name == "bare UPDATE":
                    query, params = BARE_UPDATE_SQL, (payload, payload, 2, user, chat)
                else:
                    key = f"key-{i}" if name == "chat_append, with a key" else None
                    query, params = APPEND_SQL, (user, chat, payload, key, "h" if key else None)
                started = time.perf_counter()
                await run(query, params)
                timings[name].append((time.perf_counter() - started) * 1000)
    return timings


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 turns")
    args = parser.parse_args()
    turns = 200 if args.quick else 1000
    async with migrated(None) as url:
        timings = await _run(url, turns)
    base = percentile(timings["bare UPDATE"], 0.5)
    print(f"Append statement while a chat grows to {turns:,} turns (2 per append), ms:\n")
    print("| append | p50 | p95 | max | p50 / bare UPDATE |")
    print("|---|---:|---:|---:|---:|")
    for name, values in timings.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        print(f"| {name} | {p50:.2f} | {p95:.2f} | {max(values):.2f} | {p50 / base:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main())
