"""The reranker's bench: fit `memory_plugin/retrieval/rerank.py`'s weights on LoCoMo's development split and
measure them by cross-validation across conversations (each conversation ranked by weights fit on the others).

    python -m bench.locomo_rerank --turns ../shared/bench/locomo/turns_dev.jsonl \\
        --questions ../shared/bench/locomo/questions_dev.jsonl [--fit] [--candidates 100] [--channels 150]

Offline and in memory, as `bench/locomo_lab.py`: the turns' and questions' MiniLM vectors and PostgreSQL lexemes
are computed once and kept in `--cache` (default /tmp/recall-cache; nothing of LoCoMo is written into the
repository); the hybrid score of `memory_search` is computed over each conversation's turns, its best
`--candidates` (with `--channels N`, only among each channel's best N, as `memory_search` takes them) go
through `rerank_features` (the library's own code), and a logistic regression on "is this turn evidence"
fits the weights. Prints recall@1/5/10/20/50 per category for the hybrid order and the
cross-validated reranker, then the ablation (each input removed, refit, cross-validated), then with `--fit`
the weights fit on the whole split (what `RERANK_WEIGHTS` holds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.locomo import turn_note
from bench.locomo_lab import TEXT_SCAN_LIMIT, _lexemes, _read
from memory_plugin.retrieval import ScoreComponents, ScoredMemory, analyze_query
from memory_plugin.retrieval.rerank import RERANK_FEATURES, asks_for_several, rerank_features
from memory_plugin.retrieval.search import TIME_EXPRESSION
from memory_plugin.rows import MemoryRecord
from memory_plugin.text import normalize_key

__all__ = ["main"]

Array = np.ndarray[Any, Any]
KS = (1, 5, 10, 20, 50)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""The categories fit and scored as "1–4"."""
SCORED = {**CATEGORIES, 5: "adversarial"}
"""Adversarial questions (they name the wrong person on purpose) are scored apart, never fit on."""


def _cached(cache: Path, texts: list[str], questions: list[str]) -> tuple[Array, Array, list[Counter[str]]]:
    """Turn and question vectors (as search embeds them: documents, and each question as a query) and
    lexemes, from `cache` or computed once into it."""
    cache.mkdir(parents=True, exist_ok=True)
    docs_p, qs_p, lex_p = cache / "docs.npy", cache / "qs.npy", cache / "lex.json"
    if not (docs_p.exists() and qs_p.exists() and lex_p.exists()):
        from memory_plugin.embeddings import local_embedder

        embedder = local_embedder(batch_size=128)

        async def embed() -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]]:
            return await embedder.embed_documents(texts), [await embedder.embed_query(q) for q in questions]

        docs, qs = asyncio.run(embed())
        np.save(docs_p, np.array(docs, dtype=np.float32))
        np.save(qs_p, np.array(qs, dtype=np.float32))
        lex_p.write_text(json.dumps([dict(c) for c in _lexemes(texts + questions)]))
    lex = [Counter(x) for x in json.loads(lex_p.read_text())]
    return np.load(docs_p), np.load(qs_p), lex


class _Split:
    """The split's turns as records, and each question's hybrid candidates with their reranker inputs."""

    def __init__(self, turns_path: Path, questions_path: Path, cache: Path, candidates: int, channels: int = 0) -> None:
        self.channels = channels
        """With channels > 0, candidates come as `memory_search` takes them: each channel's best this many."""
        self.turns = _read(turns_path)
        every = _read(questions_path)  # the cache holds every question; categories 1–4 are scored
        kept = [n for n, q in enumerate(every) if q["category"] in SCORED]
        self.questions = [every[n] for n in kept]
        notes = [turn_note(t) for t in self.turns]
        texts = [n.content for n in notes]
        self.dv, qv, lex = _cached(cache, texts, [q["question"] for q in every])
        self.qv = qv[kept]
        self.dlex, self.qlex = lex[: len(texts)], [lex[len(texts) + n] for n in kept]
        self.by_conv: dict[str, list[int]] = defaultdict(list)
        for i, t in enumerate(self.turns):
            self.by_conv[t["conv_id"]].append(i)
        self.df = {c: Counter(k for i in ix for k in self.dlex[i]) for c, ix in self.by_conv.items()}
        self.speakers = {c: sorted({self.turns[i]["speaker"] for i in ix}) for c, ix in self.by_conv.items()}
        epoch = datetime(2020, 1, 1, tzinfo=UTC)
        user = uuid.uuid4()
        self.records = [
            MemoryRecord(
                id=uuid.uuid4(),
                user_id=user,
                kind="fact",
                category="fact",
                content=n.content,
                confidence=1.0,
                source="explicit",
                importance=3,
                relevance_count=0,
                source_message_ids=(),
                session_id=n.session_id,
                attributes={},
                content_hash=str(i),
                created_at=epoch,
                updated_at=epoch,
                last_reinforced_at=epoch,
                occurred_at=n.occurred_at,
                metadata=n.metadata,
            )
            for i, n in enumerate(notes)
        ]
        self.cands: list[list[int]] = []
        self.features: list[dict[str, Array]] = []
        self.labels: list[Array] = []
        for qi in range(len(self.questions)):
            cand, feats, labels = self._candidates(qi, candidates)
            self.cands.append(cand)
            self.features.append(feats)
            self.labels.append(labels)

    def _parts(self, qi: int) -> dict[str, Array]:
        """The hybrid score's parts for every turn of the question's conversation (as `memory_search`)."""
        q = self.questions[qi]
        ix = self.by_conv[q["conv_id"]]
        n = len(ix)
        bm = np.zeros(n)
        for term in self.qlex[qi]:
            df = self.df[q["conv_id"]][term]
            if df:
                idf = math.log(1 + TEXT_SCAN_LIMIT / df)
                for j, i in enumerate(ix):
                    tf = self.dlex[i].get(term, 0)
                    if tf:
                        bm[j] += idf * tf * 2.2 / (tf + 1.2)
        cos = self.dv[ix] @ self.qv[qi]
        nb = np.zeros(n)
        for j in range(n):
            for k in (j - 1, j + 1):
                if 0 <= k < n and self.turns[ix[k]]["session"] == self.turns[ix[j]]["session"]:
                    nb[j] = max(nb[j], cos[k])
        question = normalize_key(q["question"])
        named = [s for s in self.speakers[q["conv_id"]] if re.search(rf"\b{normalize_key(s)}\b", question)]
        analysis = analyze_query(q["question"])
        date = np.zeros(n)
        for j, i in enumerate(ix):
            when = self.records[i].occurred_at
            assert when is not None
            best = 1.0 if when.month in analysis.months else 0.0
            for w in analysis.windows:
                gap = min(abs((when - w.start).total_seconds()), abs((when - w.end).total_seconds())) / 86400
                best = max(best, 1.0 if w.start <= when < w.end else max(0.0, 1 - gap / 14))
            date[j] = best
        return {
            "text": bm / bm.max() if bm.max() > 0 else bm,
            "vector": cos,
            "neighbour": nb,
            "speaker": np.array([float(len(named) == 1 and self.turns[i]["speaker"] == named[0]) for i in ix]),
            "date": date,
            "time": np.array(
                [
                    float(analysis.asks_when and bool(TIME_EXPRESSION.search(normalize_key(self.turns[i]["text"]))))
                    for i in ix
                ]
            ),
        }

    def _candidates(self, qi: int, limit: int) -> tuple[list[int], dict[str, Array], Array]:
        q = self.questions[qi]
        ix = self.by_conv[q["conv_id"]]
        p = self._parts(qi)
        hybrid = p["text"] + p["vector"] + 0.5 * p["neighbour"] + 0.2 * p["speaker"] + 0.2 * p["date"] + 0.1 * p["time"]
        order = np.argsort(-hybrid, kind="stable")
        if self.channels:  # as memory_search: only each channel's best are scored (BM25, vector, named dates)
            k = max(self.channels, limit)
            by_text = np.argsort(-p["text"], kind="stable")[:k]
            pool = set(by_text[p["text"][by_text] > 0])  # BM25: turns holding a word of the question
            last = p["text"][by_text[-1]] if len(by_text) else 0.0
            if (p["text"] >= last).sum() > k:  # the turns tied with the last place do not all fit: none is taken
                pool = {j for j in pool if p["text"][j] > last}
            pool |= set(np.argsort(-p["vector"], kind="stable")[:k])
            pool |= set(np.flatnonzero(p["date"] >= 1 - 1 / 14))  # inside a named date, give or take a day
            order = np.array([j for j in order if j in pool])
        order = order[:limit]
        hits = []
        for j in order:
            i = ix[j]
            prev = (
                self.records[i - 1].id if j > 0 and self.turns[i - 1]["session"] == self.turns[i]["session"] else None
            )
            parts = ScoreComponents(**{k: float(v[j]) for k, v in p.items()})
            hits.append(ScoredMemory(self.records[i], float(hybrid[j]), parts, prev))
        feats = rerank_features(q["question"], hits)
        evidence = set(q["evidence"])
        return (
            [ix[j] for j in order],
            {name: np.array([f[n] for f in feats]) for n, name in enumerate(RERANK_FEATURES)},
            np.array([float(self.turns[ix[j]]["dia_id"] in evidence) for j in order]),
        )

    def recall(self, orders: dict[int, list[int]]) -> dict[str, dict[int, float]]:
        """Recall@k by group ("1–4" and each category) of the ranked turn lists."""
        out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for qi, order in orders.items():
            q = self.questions[qi]
            evidence = set(q["evidence"])
            for k in KS:
                got = len(evidence & {self.turns[i]["dia_id"] for i in order[:k]}) / len(evidence)
                if q["category"] in CATEGORIES:
                    out["1–4"][k].append(got)
                out[f"cat{q['category']} {SCORED[q['category']]}"][k].append(got)
        return {g: {k: float(np.mean(v)) for k, v in by_k.items()} for g, by_k in out.items()}

    def fit(self, names: list[str], questions: list[int]) -> Array:
        """Logistic-regression weights of `names` over the candidates of `questions`."""
        from sklearn.linear_model import LogisticRegression

        x = np.vstack([np.column_stack([self.features[qi][n] for n in names]) for qi in questions])
        y = np.concatenate([self.labels[qi] for qi in questions])
        model = LogisticRegression(C=1.0, max_iter=5000).fit(x, y)
        return np.asarray(model.coef_[0])

    def ranked(self, qi: int, names: list[str], weights: Array) -> list[int]:
        score = np.column_stack([self.features[qi][n] for n in names]) @ weights
        return [self.cands[qi][j] for j in np.argsort(-score, kind="stable")]

    def cross_validated(self, names: list[str], several: list[str] | None = None) -> dict[int, list[int]]:
        """Each conversation ranked by weights fit on the other conversations; with `several`, the questions
        that ask for several things (`asks_for_several`) by weights of those inputs (fit on every question)."""
        orders: dict[int, list[int]] = {}
        for held in sorted(self.by_conv):
            train = [qi for qi, q in enumerate(self.questions) if q["conv_id"] != held and q["category"] in CATEGORIES]
            weights = self.fit(names, train)
            weights_several = self.fit(several, train) if several is not None else weights
            for qi, q in enumerate(self.questions):
                if q["conv_id"] == held:
                    if several is not None and asks_for_several(q["question"]):
                        orders[qi] = self.ranked(qi, several, weights_several)
                    else:
                        orders[qi] = self.ranked(qi, names, weights)
        return orders


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=Path, required=True)
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/recall-cache"))
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument(
        "--channels", type=int, default=0, help="candidates as memory_search takes them: each channel's best N"
    )
    ap.add_argument("--no-ablation", dest="ablation", action="store_false", help="skip the ablation")
    ap.add_argument("--fit", action="store_true", help="print the weights fit on the whole split")
    args = ap.parse_args(argv)
    split = _Split(args.turns, args.questions, args.cache, args.candidates, args.channels)
    names = list(RERANK_FEATURES)
    several = [n for n in names if n != "session_best"]  # the inputs of RERANK_WEIGHTS_SEVERAL
    hybrid = {qi: split.cands[qi] for qi in range(len(split.questions))}
    reranked = split.cross_validated(names, several)
    counts = Counter(f"cat{q['category']} {SCORED[q['category']]}" for q in split.questions)
    counts["1–4"] = sum(q["category"] in CATEGORIES for q in split.questions)
    print(f"\nLoCoMo dev, {counts['1–4']} questions of categories 1–4, {args.candidates} candidates, "
          "reranker cross-validated by conversation (fit on 4, scored on the 5th)\n")  # fmt: skip
    print("| group | n | order | " + " | ".join(f"R@{k}" for k in KS) + " |\n|---|---:|---|" + "---:|" * len(KS))
    before, after = split.recall(hybrid), split.recall(reranked)
    for group in sorted(before, key=lambda g: (g != "1–4", g)):
        for label, table in (("hybrid", before), ("reranked", after)):
            row = " | ".join(f"{table[group][k]:.3f}" for k in KS)
            print(f"| {group} | {counts[group]} | {label} | {row} |")
    print("\nAblation (each input removed, refit, cross-validated), recall@10:\n")
    print("| inputs | 1–4 | multi-hop | temporal | open-domain | single-hop | adversarial |")
    print("|---|---:|---:|---:|---:|---:|---:|")

    def row(label: str, table: dict[str, dict[int, float]]) -> None:
        cats = " | ".join(f"{table[f'cat{c} {n}'][10]:.3f}" for c, n in SCORED.items())
        print(f"| {label} | {table['1–4'][10]:.3f} | {cats} |")

    row("hybrid order (no reranker)", before)
    row("all", after)
    row("all, `session_best` for every question (one set of weights)", split.recall(split.cross_validated(names)))
    groups = {
        "the session (session, session_rank)": {"session", "session_rank"},
        "the adjacent turns (adjacent, adjacent_rank)": {"adjacent", "adjacent_rank"},
        "both clusters (session and adjacent, all four)": {"session", "session_rank", "adjacent", "adjacent_rank"},
        "every new input (refit of the hybrid parts alone)": {
            "rank", "session", "session_rank", "adjacent", "adjacent_rank", "entity", "session_best"
        },
    }  # fmt: skip
    for label, removed in ([(f"`{n}`", {n}) for n in names] + list(groups.items())) if args.ablation else []:
        kept = [n for n in names if n not in removed]
        row(f"all − {label}", split.recall(split.cross_validated(kept, [n for n in several if n not in removed])))
    if args.fit:
        fit_on = [qi for qi, q in enumerate(split.questions) if q["category"] in CATEGORIES]
        for label, inputs in (("RERANK_WEIGHTS", names), ("RERANK_WEIGHTS_SEVERAL", several)):
            print(f"\n{label}, fit on the whole split:\n")
            for name, w in zip(inputs, split.fit(inputs, fit_on), strict=True):
                print(f'    "{name}": {w:.3f},')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
