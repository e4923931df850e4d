"""Candidate generation lab: which channels widen the reranker's candidates with evidence the hybrid score's
best 50 miss, measured in memory on LoCoMo's development split (cross-validated by conversation).

    python -m bench.locomo_candidates --turns ../shared/bench/locomo/turns_dev.jsonl \\
        --questions ../shared/bench/locomo/questions_dev.jsonl

Reuses `bench/locomo_rerank.py`'s split (cached MiniLM vectors and lexemes in `--cache`). Channels, each over
all of a conversation's turns: the sub-queries of `memory_plugin/retrieval/subqueries.py` (best cosine of a
turn with any of them), pseudo-relevance feedback (the question's vector plus the mean of the first round's
best five, cosine), and sessions (a session's best hybrid score; turns of the best sessions). Prints the
candidates' recall (R@50/100/150) and the cross-validated recall@10 of the reranker with each channel.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bench.locomo_rerank import CATEGORIES, SCORED, Array, _Split
from memory_plugin.retrieval import ScoreComponents, ScoredMemory
from memory_plugin.retrieval.rerank import RERANK_FEATURES, question_entities, rerank_features
from memory_plugin.text import normalize_key

__all__ = ["main", "sub_queries"]

# Sub-queries: the question without wh-words, auxiliaries and function words ("activities Melanie partake"),
# and each of its names and numbers alone. Measured here, not kept on the search path (docs/retrieval.md).
_WORD = re.compile(r"[\w'’.-]*\w")
_FUNCTION_WORDS = (
    "what when where who whom whose which why how did does do is are was were be been being has have had can"
    " could would will should shall may might must likely probably some any kind kinds type types sort ever"
    " the a an and or but if in on at for to of from with by about as into than then that this these those it"
    " its her his their they them he she him i me my you your we our us there here also both all"
    " not no many much more most"
    " qué que cuándo cuando dónde donde quién quien quiénes cuál cual cuáles cómo como cuánto cuántos por"
    " para el la los las un una y o en de del con es son fue era"
)
_FUNCTION = frozenset(normalize_key(w) for w in _FUNCTION_WORDS.split())


def content_words(question: str) -> tuple[str, ...]:
    """The words of `question` that are not question or function words, in order, as written."""
    words = (re.sub(r"['’]s$", "", w) for w in _WORD.findall(question))
    return tuple(w for w in words if w and normalize_key(w) not in _FUNCTION)


def sub_queries(question: str) -> tuple[str, ...]:
    """The sub-queries of `question`, without repeats and without the question
    itself; empty when the question has nothing to split."""
    words = content_words(question)
    out: list[str] = []
    content = " ".join(words)
    if content and normalize_key(content) != normalize_key(question):
        out.append(content)
    if len(words) > 1:
        out.extend(e for e in question_entities(question) if e != normalize_key(content))
    return tuple(dict.fromkeys(out))


_ASKS_MANY = re.compile(
    r"^\W*(?:what|which|how many|in what ways|where)\b(?:\s+\w+){0,2}?\s+\w+[^s\W'’]s\b"
    r"|\b(?:both|all|ever|times|things|kinds|types|some|any)\b",
    re.IGNORECASE,
)


def _sub_vectors(cache: Path, texts: list[str]) -> dict[str, Array]:
    key = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]
    path = cache / f"subq-{key}.npy"
    if not path.exists():
        from memory_plugin.embeddings import local_embedder

        embedder = local_embedder(batch_size=128)
        np.save(path, np.array(asyncio.run(embedder.embed_documents(texts)), dtype=np.float32))
    return dict(zip(texts, np.load(path), strict=True))


class _Wide(_Split):
    def __init__(self, args: argparse.Namespace) -> None:
        self.opts = args
        super().__init__(args.turns, args.questions, args.cache, args.candidates)

    def _candidates(self, qi: int, limit: int) -> tuple[list[int], dict[str, Array], Array]:
        if not hasattr(self, "subv"):
            subs = sorted({s for q in self.questions for s in sub_queries(q["question"])})
            self.subv = _sub_vectors(self.opts.cache, subs)
        q = self.questions[qi]
        ix = self.by_conv[q["conv_id"]]
        p = self._parts(qi)
        hybrid = p["text"] + p["vector"] + 0.5 * p["neighbour"] + 0.2 * p["speaker"] + 0.2 * p["date"] + 0.1 * p["time"]
        order = list(np.argsort(-hybrid, kind="stable"))
        dv = self.dv[ix]
        subs = [s for s in sub_queries(q["question"]) if self.opts.entities or " " in s]
        sub = np.max(np.stack([dv @ self.subv[s] for s in subs]), axis=0) if subs else np.zeros(len(ix))
        top = order[: self.opts.prf_k]
        prf_q = self.qv[qi] + dv[top].mean(axis=0)
        prf = dv @ (prf_q / np.linalg.norm(prf_q))
        sess_of = [self.turns[i]["session"] for i in ix]
        sess_best: dict[int, float] = {}
        for j, s in enumerate(sess_of):
            sess_best[s] = max(sess_best.get(s, 0.0), float(hybrid[j]))
        top_h = float(hybrid.max()) or 1.0
        session = np.array([sess_best[s] / top_h for s in sess_of])
        pool = list(order[:limit])
        if self.opts.sub_k:
            pool += list(np.argsort(-sub, kind="stable")[: self.opts.sub_k])
        if self.opts.prf_n:
            pool += list(np.argsort(-prf, kind="stable")[: self.opts.prf_n])
        if self.opts.sessions:
            best_sessions = sorted(sess_best, key=lambda s: -sess_best[s])[: self.opts.sessions]
            for s in best_sessions:
                inside = [j for j in order if sess_of[j] == s][: self.opts.per_session]
                pool += inside
        chosen = set(pool)
        cand = [j for j in order if j in chosen]  # the hybrid order over the union
        hits = []
        for j in cand:
            i = ix[j]
            prev = (
                self.records[i - 1].id if j > 0 and self.turns[i - 1]["session"] == self.turns[i]["session"] else None
            )
            parts = ScoreComponents(**{k: float(v[j]) for k, v in p.items()})
            hits.append(ScoredMemory(self.records[i], float(hybrid[j]), parts, prev))
        feats = rerank_features(q["question"], hits)
        evidence = set(q["evidence"])
        out = {name: np.array([f[n] for f in feats]) for n, name in enumerate(RERANK_FEATURES)}
        out["sub"] = np.array([sub[j] for j in cand])
        out["sub_rel"] = np.array([sub[j] - sub.max() for j in cand])
        out["prf"] = np.array([prf[j] for j in cand])
        out["prf_rel"] = np.array([prf[j] - prf.max() for j in cand])
        out["session_best_lab"] = np.array([session[j] for j in cand])
        return [ix[j] for j in cand], out, np.array([float(self.turns[ix[j]]["dia_id"] in evidence) for j in cand])

    def ranked(self, qi: int, names: list[str], weights: Array) -> list[int]:
        order = super().ranked(qi, names, weights)
        cap = self.opts.cap
        if not cap or (self.opts.cap_many and not _ASKS_MANY.search(self.questions[qi]["question"])):
            return order
        seen: Counter[tuple[str, int]] = Counter()
        first, later = [], []
        for i in order:
            key = (self.turns[i]["conv_id"], self.turns[i]["session"])
            seen[key] += 1
            (first if seen[key] <= cap else later).append(i)
        return first + later


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=Path, required=True)
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/recall-cache"))
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--sub-k", type=int, default=0)
    ap.add_argument("--prf-k", type=int, default=5)
    ap.add_argument("--prf-n", type=int, default=0)
    ap.add_argument("--sessions", type=int, default=0)
    ap.add_argument("--per-session", type=int, default=10)
    ap.add_argument("--drop", default="", help="inputs of RERANK_FEATURES left out, comma-separated")
    ap.add_argument("--cap", type=int, default=0)
    ap.add_argument("--cap-many", action="store_true", help="cap only questions that ask for several things")
    ap.add_argument("--entities", action="store_true")
    ap.add_argument("--extra", default="sub,prf", help="extra inputs, comma-separated sets separated by ';'")
    args = ap.parse_args(argv)
    split = _Wide(args)
    sizes = [len(c) for c in split.cands]
    pool_recall: dict[str, list[float]] = {}
    for qi, q in enumerate(split.questions):
        ev = set(q["evidence"])
        got = len(ev & {split.turns[i]["dia_id"] for i in split.cands[qi]}) / len(ev)
        if q["category"] in CATEGORIES:
            pool_recall.setdefault("1–4", []).append(got)
        pool_recall.setdefault(SCORED[q["category"]], []).append(got)
    print(f"\n{vars(args)}\npool size mean {np.mean(sizes):.1f} max {max(sizes)}; pool recall: "
          + ", ".join(f"{g} {np.mean(v):.3f}" for g, v in pool_recall.items()))  # fmt: skip
    names = [n for n in RERANK_FEATURES if n not in args.drop.split(",")]
    print("| inputs | 1–4 | multi-hop | temporal | open-domain | single-hop | adversarial | 1–4 R@20 | adv R@1 |")
    for extra in ["", *args.extra.split(";")]:
        cols = names + [e for e in extra.split(",") if e]
        t: dict[str, Any] = split.recall(split.cross_validated(cols))
        cats = " | ".join(f"{t[f'cat{c} {n}'][10]:.3f}" for c, n in SCORED.items())
        adversarial_r1 = t["cat5 adversarial"][1]
        print(f"| +{extra or 'nothing'} | {t['1–4'][10]:.3f} | {cats} | {t['1–4'][20]:.3f} | {adversarial_r1:.3f} |")

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
