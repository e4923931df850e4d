"""The cost of the database's own bounds on the write path: `memory_upsert_items` as a user (role
`authenticated` with the user's claims, as the plugin and PostgREST run it), with the bounds' triggers on
`user_memory` enabled and disabled, interleaved in one run (rounds alternate) so machine noise hits both alike.

    MEMORY_DATA_DIR=/tmp/<you>-data python -m bench.db_bounds

Writes: a one-fact write (a conversation turn) and a 700-fact write (an imported conversation); each repeated,
p50 and p90 in ms. Users are fresh per write, so every item inserts a row (the counted path).
"""

from __future__ import annotations

import asyncio
import json
import time
from uuid import uuid4

import psycopg

from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.calls import user_claims
from memory_plugin.database.migrations import migrate
from memory_plugin.models import MemorizedFact
from memory_plugin.settings import MemorySettings
from memory_plugin.write.items import items_from_update

from .tables import percentile

TRIGGERS = ("user_memory_bounds_insert", "user_memory_bounds_update", "user_memory_bounds_delete")


def _items(n: int) -> str:
    facts = [
        MemorizedFact(
            content=f"Pedido {i} de bridas de latón, lote {i * 7}", category="fact", confidence=0.9, source="explicit"
        )
        for i in range(n)
    ]
    return json.dumps([i.as_json() for i in items_from_update(facts, None, None, [], None)])


def _write(conn: psycopg.Connection[tuple[object, ...]], payload: str) -> float:
    user = uuid4()
    started = time.perf_counter()
    with conn.transaction():
        conn.execute("select set_config('role', 'authenticated', true)")
        conn.execute("select set_config('request.jwt.claims', %s, true)", (user_claims(user),))
        conn.execute("select count(*) from public.memory_upsert_items(%s, %s::jsonb)", (user, payload))
    return (time.perf_counter() - started) * 1000


def main() -> None:
    url = EmbeddedPostgres.from_settings(MemorySettings(), keep_running=True).start()
    with psycopg.connect(url, autocommit=True) as conn:
        asyncio.run(_migrate(url))
        one, many = _items(1), _items(700)
        times: dict[tuple[str, str], list[float]] = {}
        for round_ in range(10):
            for enabled in (True, False) if round_ % 2 == 0 else (False, True):
                verb = "enable" if enabled else "disable"
                for trigger in TRIGGERS:
                    conn.execute(f"alter table public.user_memory {verb} trigger {trigger}")
                label = "bounds on" if enabled else "bounds off"
                times.setdefault((label, "1 fact"), []).extend(_write(conn, one) for _ in range(40))
                times.setdefault((label, "700 facts"), []).append(_write(conn, many))
        for trigger in TRIGGERS:
            conn.execute(f"alter table public.user_memory enable trigger {trigger}")
    print("| write | bounds off p50 / p90 (ms) | bounds on p50 / p90 (ms) | p50 ratio |")
    print("|---|---|---|---|")
    for size in ("1 fact", "700 facts"):
        off, on = times[("bounds off", size)], times[("bounds on", size)]
        print(
            f"| {size} | {percentile(off, 0.5):.2f} / {percentile(off, 0.9):.2f} | {percentile(on, 0.5):.2f} /"
            f" {percentile(on, 0.9):.2f} | {percentile(on, 0.5) / percentile(off, 0.5):.2f} |"
        )


async def _migrate(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)


if __name__ == "__main__":
    main()
