"""What sealing sensitive facts costs: the cipher itself, a write of sensitive facts, and a query-aware context.

    MEMORY_DATA_DIR=/tmp/x python -m bench.sealing [--rounds 30] [--facts 1000]

1. `seal_text` + `open_text` of a 60-character fact (AES-256-GCM, the keyed hash), µs of CPU, median of 2,000.
2. `update_memory` of 10 `health_note` facts by one user, without keys (stored plain) and with keys (sealed),
   interleaved round by round on one embedded database, p50 and p95 in ms (no embedder in either).
3. `get_memory_context(query=...)` of a user with `--facts` facts (a tenth of them sealed in the keyed run),
   without and with keys, interleaved: with keys the read ranks facts again, so the best-ranked sealed facts
   join the search's hits.

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import time
from uuid import uuid4

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.crypto import open_text, parse_key_ring, seal_text, sealed_hash
from memory_plugin.models import MemorizedFact, MemoryUpdate

_KEY = base64.b64encode(os.urandom(32)).decode()
_HASH = base64.b64encode(os.urandom(32)).decode()


def _cipher_us() -> float:
    ring = parse_key_ring(f"k1:{_KEY}", None, _HASH)
    user, text = uuid4(), "Camina treinta minutos cada mañana por indicación de su médico"
    samples = []
    for _ in range(2_000):
        start = time.process_time_ns()
        sealed = seal_text(ring, text, user_id=user, kind="fact", category="health_note")
        sealed_hash(ring, user, "0" * 64)
        open_text(ring, sealed, user_id=user, kind="fact", category="health_note")
        samples.append((time.process_time_ns() - start) / 1000)
    return statistics.median(samples)


def _facts(round_: int, n: int, category: str = "health_note") -> list[MemorizedFact]:
    return [
        MemorizedFact(content=f"Nota {round_}-{i}: camina {i} minutos al día", category=category,  # type: ignore[arg-type]
                      confidence=0.9, source="explicit")
        for i in range(n)
    ]  # fmt: skip


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _run(rounds: int, facts: int) -> None:
    base = MemorySettings(embedding_model="none")
    keyed = MemorySettings(embedding_model="none", encryption_keys=f"k1:{_KEY}", encryption_hash_key=_HASH)
    writes: dict[str, list[float]] = {"plain": [], "sealed": []}
    reads: dict[str, list[float]] = {"plain": [], "sealed": []}
    async with MemoryManager.open(base) as plain, MemoryManager.open(keyed) as sealed:
        managers = {"plain": plain, "sealed": sealed}
        users = {"plain": uuid4(), "sealed": uuid4()}
        for name, memory in managers.items():
            for start in range(0, facts, 100):
                batch = _facts(-start, 100, "fact")
                if name == "sealed":
                    batch[:10] = _facts(-start - 1, 10)
                await memory.update_memory(MemoryUpdate(user_id=users[name], new_facts=batch))
        for r in range(rounds):
            for name, memory in managers.items():
                start = time.perf_counter()
                await memory.update_memory(MemoryUpdate(user_id=uuid4(), new_facts=_facts(r, 10)))
                writes[name].append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                await memory.get_memory_context(f"s-{r}", users[name], query="¿cuántos minutos camina?")
                reads[name].append((time.perf_counter() - start) * 1000)
    print(f"\nseal + keyed hash + open of a 60-character fact: {_cipher_us():.1f} µs CPU (median of 2,000)\n")
    print(f"| operation ({rounds} rounds, interleaved) | plain p50 | sealed p50 | plain p95 | sealed p95 |")
    print("|---|---|---|---|---|")
    for label, table in (("update_memory, 10 health notes", writes), (f"context with a query, {facts} facts", reads)):
        row = [_p(table["plain"], 0.5), _p(table["sealed"], 0.5), _p(table["plain"], 0.95), _p(table["sealed"], 0.95)]
        print(f"| {label} | " + " | ".join(f"{v:.2f} ms" for v in row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--facts", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(_run(args.rounds, args.facts))


if __name__ == "__main__":
    main()
