"""The LoCoMo experiment bench: retrieval methods tried in memory, fast, to choose what `memory_search` does.

    python -m bench.locomo_lab --turns ../shared/bench/locomo/turns_dev.jsonl \\
        --questions ../shared/bench/locomo/questions_dev.jsonl

Embeds every turn ("Speaker: text [image: caption]") and question with the offline all-MiniLM-L6-v2 once,
takes their lexemes from PostgreSQL's `memory_private.memory_tsvector` (the configuration search uses: an embedded
server, migrated, in a temporary directory), then ranks each conversation's turns for each question with a
ladder of methods, each adding one signal to the previous, and prints recall@1/5/10/20 over categories 1–4.
No database round trip per question, so the whole ladder runs in about a minute. The signals mirror
`public.memory_search` (BM25 with idf = ln(1 + text_scan_limit / df), no length normalisation; max-normalised; the
speaker and date rules of `memory_plugin/retrieval`), computed over all of a conversation's turns rather
than 50 candidates per channel (measured: the same recall@10 within 0.001). Nothing here looks at the
answers or the evidence except the scoring.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench.embedded import migrated_database
from bench.locomo import turn_note
from memory_plugin.embeddings import local_embedder
from memory_plugin.retrieval import SearchWeights, analyze_query
from memory_plugin.retrieval.search import TIME_EXPRESSION
from memory_plugin.text import normalize_key

__all__ = ["main"]

Scores = Callable[[int, list[int]], np.ndarray[Any, Any]]
TEXT_SCAN_LIMIT = SearchWeights().text_scan_limit
"""BM25's idf scale, as in `memory_search` (`MEMORY_SEARCH_TEXT_SCAN_LIMIT`)."""


def _read(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _lexemes(texts: list[str]) -> list[Counter[str]]:
    with migrated_database("locomo-lab-") as url:

        async def run() -> list[Counter[str]]:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                cur = await conn.execute(
                    "select array(select u.lexeme || ':' || cardinality(u.positions)"
                    " from unnest(memory_private.memory_tsvector(x)) as u) from unnest(%s::text[]) with ordinality"
                    " as t(x, n) order by n",
                    (texts,),
                )
                rows = await cur.fetchall()
            return [Counter({t.rsplit(":", 1)[0]: int(t.rsplit(":", 1)[1]) for t in row[0]}) for row in rows]

        return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=Path, required=True)
    ap.add_argument("--questions", type=Path, required=True)
    args = ap.parse_args(argv)
    turns = _read(args.turns)
    questions = [q for q in _read(args.questions) if q["category"] != 5]
    notes = [turn_note(t) for t in turns]
    texts = [n.content for n in notes]

    embedder = local_embedder(batch_size=128)

    async def embed() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        docs = await embedder.embed_documents(texts)
        qs = await embedder.embed_documents([q["question"] for q in questions])
        return np.array(docs), np.array(qs)

    doc_vecs, q_vecs = asyncio.run(embed())
    lex = _lexemes(texts + [q["question"] for q in questions])
    doc_lex, q_lex = lex[: len(texts)], lex[len(texts) :]

    by_conv: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(turns):
        by_conv[t["conv_id"]].append(i)
    speakers = {c: sorted({turns[i]["speaker"] for i in ix}) for c, ix in by_conv.items()}

    def nz(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        top = float(x.max()) if len(x) else 0.0
        return x / top if top > 0 else x

    def bm25(qi: int, ix: list[int]) -> np.ndarray[Any, Any]:
        df: Counter[str] = Counter()
        for i in ix:
            df.update(doc_lex[i].keys())
        out = np.zeros(len(ix))
        for term in q_lex[qi]:
            if df[term]:
                idf = math.log(1 + TEXT_SCAN_LIMIT / df[term])
                for j, i in enumerate(ix):
                    tf = doc_lex[i].get(term, 0)
                    if tf:
                        out[j] += idf * tf * 2.2 / (tf + 1.2)
        return out

    def cosine(qi: int, ix: list[int]) -> np.ndarray[Any, Any]:
        return np.asarray(doc_vecs[ix] @ q_vecs[qi])

    def neighbour(qi: int, ix: list[int]) -> np.ndarray[Any, Any]:
        cos = cosine(qi, ix)
        out = np.zeros(len(ix))
        for j, i in enumerate(ix):
            for k in (j - 1, j + 1):
                if 0 <= k < len(ix) and turns[ix[k]]["session"] == turns[i]["session"]:
                    out[j] = max(out[j], cos[k])
        return out

    def speaker(qi: int, ix: list[int]) -> np.ndarray[Any, Any]:
        question = normalize_key(questions[qi]["question"])
        named = [s for s in speakers[questions[qi]["conv_id"]] if re.search(rf"\b{normalize_key(s)}\b", question)]
        return np.array([1.0 if len(named) == 1 and turns[i]["speaker"] == named[0] else 0.0 for i in ix])

    def date(qi: int, ix: list[int]) -> np.ndarray[Any, Any]:
        analysis = analyze_query(questions[qi]["question"])
        out = np.zeros(len(ix))
        for j, i in enumerate(ix):
            when = notes[i].occurred_at
            assert when is not None
            best = 1.0 if when.month in analysis.months else 0.0
            for w in analysis.windows:
                inside = w.start <= when < w.end
                gap = min(abs((when - w.start).total_seconds()), abs((when - w.end).total_seconds())) / 86400
                best = max(best, 1.0 if inside else max(0.0, 1 - gap / 14))
            out[j] = best
        return out

    def time_expr(qi: int, ix: list[int]) -> np.ndarray[Any, Any]:
        if not analyze_query(questions[qi]["question"]).asks_when:
            return np.zeros(len(ix))
        return np.array([1.0 if TIME_EXPRESSION.search(normalize_key(turns[i]["text"])) else 0.0 for i in ix])

    def rrf(*parts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out = np.zeros(len(parts[0]))
        for p in parts:
            ranks = np.empty(len(p))
            ranks[np.argsort(-p, kind="stable")] = np.arange(len(p))
            out += 1 / (60 + ranks + 1)
        return out

    ladder: list[tuple[str, Scores]] = [
        ("BM25 (English stems)", bm25),
        ("vector only (MiniLM, cosine)", cosine),
        ("reciprocal-rank fusion of the two (k 60)", lambda q, ix: rrf(bm25(q, ix), cosine(q, ix))),
        ("weighted sum: BM25/best + cosine", lambda q, ix: nz(bm25(q, ix)) + cosine(q, ix)),
        ("+ 0.5 × best neighbour cosine", lambda q, ix: nz(bm25(q, ix)) + cosine(q, ix) + 0.5 * neighbour(q, ix)),
        (
            "+ 0.2 × named speaker",
            lambda q, ix: nz(bm25(q, ix)) + cosine(q, ix) + 0.5 * neighbour(q, ix) + 0.2 * speaker(q, ix),
        ),
        (
            "+ 0.2 × named date",
            lambda q, ix: (
                nz(bm25(q, ix)) + cosine(q, ix) + 0.5 * neighbour(q, ix) + 0.2 * speaker(q, ix) + 0.2 * date(q, ix)
            ),
        ),
        (
            "+ 0.1 × time expression for 'when'",
            lambda q, ix: (
                nz(bm25(q, ix))
                + cosine(q, ix)
                + 0.5 * neighbour(q, ix)
                + 0.2 * speaker(q, ix)
                + 0.2 * date(q, ix)
                + 0.1 * time_expr(q, ix)
            ),
        ),
    ]
    print(f"\nLoCoMo, {len(questions)} questions of categories 1–4, {len(turns)} turns\n")
    print("| method | R@1 | R@5 | R@10 | R@20 |\n|---|---:|---:|---:|---:|")
    for name, method in ladder:
        recall: dict[int, list[float]] = defaultdict(list)
        for qi, q in enumerate(questions):
            ix = by_conv[q["conv_id"]]
            order = np.argsort(-method(qi, ix), kind="stable")
            evidence = set(q["evidence"])
            for k in (1, 5, 10, 20):
                top = {turns[ix[j]]["dia_id"] for j in order[:k]}
                recall[k].append(len(evidence & top) / len(evidence))
        print(f"| {name} | " + " | ".join(f"{np.mean(recall[k]):.3f}" for k in (1, 5, 10, 20)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
