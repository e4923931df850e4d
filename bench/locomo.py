"""LoCoMo turn retrieval through `MemoryManager.remember` and `MemoryManager.search`.

    python -m bench.locomo --turns ../shared/bench/locomo/turns_dev.jsonl \\
        --questions ../shared/bench/locomo/questions_dev.jsonl --out /tmp/locomo_pred.jsonl

For each conversation: one fresh user; every turn stored with `remember_many` (one batch per session:
content "Speaker: text [image: caption]", `occurred_at` = the session's date, `session_id` = the session,
metadata = dia_id and speaker); then every question answered with `search(limit=50)`, writing
`{"qid": …, "retrieved": [dia_id, …]}` lines. Then the reference scorer (`score.py` beside the questions,
or `--scorer`) prints recall/hit@1/5/10/20 per category, and this script prints the wall time and the
search latency (p50/p95, including the question's embedding). The data is read where it is (LoCoMo is
CC BY-NC 4.0: never copied into this repository). Uses the embedded PostgreSQL unless `MEMORY_DATABASE_URL`
is set, and the offline MiniLM unless `--embedding-model` says otherwise.

`--one-user` stores every conversation as one user's history (the development split: 2,760 turns, five times
a conversation), and asks each question against all of it: a turn of another conversation counts as a miss.
It shows whether the ranking holds up as a history grows (what capping or reordering postings would cost:
the 200 newest postings per word instead of 500 lost 0.021 recall@10 there).

`--rewrite-model MODEL` (a pydantic-ai model name, e.g. `openai:gpt-4o-mini`, its key in the environment) also
searches every question with the optional LLM rewrite on (`search.rewrite_model`, `retrieval/rewrite.py`), each
question both ways in turn: predictions in `<out>-rewrite.jsonl`, their own score table and latency rows (the
model call included: each timed search asks the model afresh). The model is asked once before anything is
stored; if it cannot answer the run stops there (exit status 2) rather than measure the plain search twice.
`--rewrite-model offline-stand-in` is no model: two deterministic phrasings per question (its content words
without wh-words and stop words, and its names alone), answered at once. It measures what the rewrite path itself
costs (three more searches' embeddings, SQL and fusion) and how the fusion copes with weak phrasings; nothing
about a real model's phrasings.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.tables import percentile
from memory_plugin import MemoryManager, MemorySettings, Note
from memory_plugin.retrieval.rerank import question_entities
from memory_plugin.retrieval.rewrite import QueryRewriter
from memory_plugin.retrieval.searcher import Searcher

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models import Model
    from pydantic_ai.models.function import AgentInfo

__all__ = ["PREVIOUS_RERANK_WEIGHTS", "RewriteModelUnavailable", "main", "run"]

PREVIOUS_RERANK_WEIGHTS = {
    "hybrid": 3.164, "text": 0.138, "vector": 0.372, "neighbour": -0.421, "speaker": 1.510, "date": 0.775,
    "time": 0.564, "rank": 1.939, "session": -2.051, "session_rank": 0.787, "adjacent": 0.376,
    "adjacent_rank": 1.733, "entity": 0.816, "session_best": 5.365,
}  # fmt: skip
"""The reranker of dbc76bb (one set of weights for every question, `session_best` included): `--before`."""
PREVIOUS_RERANK_CANDIDATES = 100
"""dbc76bb's candidates to the reranker (each channel's best 150, as now)."""
HYBRID_CANDIDATES = 50
"""Each channel's best, for the hybrid order alone (`--compare`: what the store returns without a reranker)."""


PROBE_QUESTION = "When did Caroline go to the LGBTQ support group?"
"""Asked of `--rewrite-model` before anything is stored: the run stops if the model cannot answer it."""


STAND_IN = "offline-stand-in"
"""`--rewrite-model` value of the offline stand-in (`stand_in_phrasings`), not a model."""
_STOP_WORDS = frozenset({
    "what", "when", "where", "who", "whom", "which", "why", "how", "did", "does", "do", "is", "was", "were", "are",
    "the", "a", "an", "of", "to", "in", "on", "for", "with", "about", "and", "or", "her", "his", "their", "its",
    "has", "have", "had", "be", "been", "that", "this", "would", "could", "might", "by", "at", "from", "as", "it",
})  # fmt: skip


def stand_in_phrasings(question: str) -> list[str]:
    """The offline stand-in's phrasings: the question's content words, and its names and numbers alone."""
    content = " ".join(w for w in re.findall(r"[\w'’-]+", question) if w.lower() not in _STOP_WORDS)
    return [p for p in (content, " ".join(question_entities(question))) if p]


def _stand_in_model() -> Model:
    from pydantic_ai.messages import ModelResponse, ToolCallPart, UserPromptPart
    from pydantic_ai.models.function import FunctionModel

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        part = messages[-1].parts[-1]
        question = part.content if isinstance(part, UserPromptPart) and isinstance(part.content, str) else ""
        queries = stand_in_phrasings(question.removeprefix("Question: "))
        return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args={"queries": queries})])

    return FunctionModel(answer, model_name=STAND_IN)


class RewriteModelUnavailable(RuntimeError):
    """The rewrite model could not answer the probe question (no key, no network, unknown model)."""


async def _rewriter(model: Model | str) -> QueryRewriter:
    """A rewriter for `model` that has answered `PROBE_QUESTION` (else `RewriteModelUnavailable`)."""
    rewriter = QueryRewriter(model)
    try:
        await rewriter.ask(PROBE_QUESTION)
    except Exception as exc:
        raise RewriteModelUnavailable(
            f"the rewrite model {rewriter.label!r} could not be reached ({exc!r}); set its provider's API key (e.g."
            " OPENAI_API_KEY for openai:…) on a machine with network access, or leave --rewrite-model out"
        ) from exc
    rewriter.clear_cache()
    return rewriter


class _ServerCpu:
    """CPU seconds (user + system) of the embedded server's processes, read from /proc: a search's SQL runs
    there, not in this process. None when the database is not the embedded one of `data_dir`."""

    def __init__(self, data_dir: Path | None) -> None:
        import psutil  # type: ignore[import-untyped]

        self._psutil = psutil
        self.postmaster = None
        pid_file = data_dir / "postgres" / "postmaster.pid" if data_dir is not None else None
        if pid_file is not None and pid_file.exists():
            self.postmaster = psutil.Process(int(pid_file.read_text().split("\n", 1)[0]))
        self.refresh()

    def refresh(self) -> None:
        """Look the server's processes up again (the pool may have opened connections)."""
        self.processes = [self.postmaster, *self.postmaster.children()] if self.postmaster is not None else []

    def seconds(self) -> float | None:
        if not self.processes:
            return None
        total = 0.0
        for proc in self.processes:
            try:
                t = proc.cpu_times()
            except self._psutil.NoSuchProcess:
                continue
            total += t.user + t.system
        return total


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def turn_note(turn: dict[str, Any]) -> Note:
    """A LoCoMo turn as a note: the speaker and the image caption are part of what was said."""
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    occurred = datetime.fromisoformat(turn["session_datetime"])
    return Note(
        content=text,
        occurred_at=occurred if occurred.tzinfo else occurred.replace(tzinfo=UTC),
        session_id=f"{turn['conv_id']}/session-{turn['session']}",
        metadata={"dia_id": turn["dia_id"], "speaker": turn["speaker"]},
    )


def _own_dia_id(dia_id: str, conv_id: str) -> str:
    """A qualified dia_id (`--one-user`) as the scorer knows it when it is the question's conversation's;
    another conversation's turn keeps its qualifier, so it can never match the evidence."""
    conv, sep, own = dia_id.partition("|")
    return own if sep and conv == conv_id else dia_id


async def run(
    turns_path: Path,
    questions_path: Path,
    out_path: Path,
    settings: MemorySettings,
    *,
    limit: int = 50,
    one_user: bool = False,
    compare_path: Path | None = None,
    before_path: Path | None = None,
    latency_limit: int = 10,
    rewrite_path: Path | None = None,
    rewrite_model: Model | str | None = None,
) -> dict[str, Any]:
    """Store, search, write predictions; returns timings. `one_user`: every conversation in one history.
    `compare_path`: also search without the reranker (the hybrid order alone), each question both ways in
    turn, writing those predictions there; `before_path`: also with the previous reranker (dbc76bb: one
    set of weights, `PREVIOUS_RERANK_WEIGHTS`). Each search's CPU time is taken too: this process's (the embedding, the
    reranker) and the embedded server's (the SQL). Latency is timed on a search of `latency_limit` hits (what an agent
    asks for), its question embedded afresh; the ranking scored is a second search of `limit` hits. `rewrite_path`
    and `rewrite_model`: also with the LLM rewrite (the model asked afresh by each timed search; the scored search
    reuses its phrasings), writing those predictions there; `RewriteModelUnavailable` before anything is stored if
    the model cannot answer."""
    rewriter = await _rewriter(rewrite_model) if rewrite_path is not None and rewrite_model is not None else None
    turns = _read_jsonl(turns_path)
    questions = _read_jsonl(questions_path)
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for turn in turns:
        by_conv[turn["conv_id"]].append(turn)
    latencies: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    server_cpu: dict[str, list[float]] = defaultdict(list)
    store_seconds = 0.0
    refused: list[str] = []
    async with MemoryManager.open(settings) as memory:
        shared = uuid.uuid4()
        users = {conv: shared if one_user else uuid.uuid4() for conv in by_conv}
        started = time.perf_counter()
        for conv, conv_turns in by_conv.items():
            sessions: dict[int, list[dict[str, Any]]] = defaultdict(list)
            for turn in sorted(conv_turns, key=lambda t: (t["session"], t["turn_index"])):
                sessions[turn["session"]].append(turn)
            for session in sorted(sessions):
                notes = [turn_note(t) for t in sessions[session]]
                if one_user:  # dia_ids repeat across conversations: qualify them
                    for note in notes:
                        note.metadata["dia_id"] = f"{conv}|{note.metadata['dia_id']}"
                outcome = await memory.remember_many_detailed(users[conv], notes)
                # A turn the privacy policy refuses is reported and skipped; it never stops the run.
                refused.extend(f"{notes[n.index].metadata['dia_id']}: {n.reason}" for n in outcome.refused)
        store_seconds = time.perf_counter() - started

        # Each mode searches through a searcher of its own over the manager's store and embedder (what
        # `memory.search` does with the manager's): "after" as configured; "hybrid" the store's order, each
        # channel's best 50; "before" dbc76bb's reranker (one set of weights); "rewrite" with the LLM rewrite.
        def searcher(**weights: Any) -> Searcher:
            made = Searcher(memory.settings, memory.store, memory.embedder)
            made.weights = dataclasses.replace(made.weights, **weights)
            made.rewriter = None  # only the "rewrite" mode's, whatever MEMORY_SEARCH_REWRITE_MODEL says
            return made

        after = searcher()
        modes: list[tuple[str, Searcher, Path]] = [("after", after, out_path)]
        if compare_path is not None:
            modes.append(("hybrid", searcher(rerank_candidates=0, candidates=HYBRID_CANDIDATES), compare_path))
        if before_path is not None:
            before = searcher(rerank_candidates=PREVIOUS_RERANK_CANDIDATES)
            before.rerank_weights, before.several_weights = PREVIOUS_RERANK_WEIGHTS, None
            modes.append(("before", before, before_path))
        if rewriter is not None and rewrite_path is not None:
            rewriting = searcher()
            rewriting.rewriter = rewriter
            modes.append(("rewrite", rewriting, rewrite_path))
        outs = {path: path.open("w", encoding="utf-8") for *_, path in modes}
        server = _ServerCpu(settings.data_dir if settings.database_url is None else None)
        try:
            for n, q in enumerate(questions):
                user = users.get(q["conv_id"])
                if n % 50 == 0:
                    server.refresh()
                # Rotate which mode goes first, so that none always runs with a warm database cache.
                shift = n % len(modes)
                for mode, mode_searcher, path in modes[shift:] + modes[:shift]:
                    retrieved: list[str] = []
                    if user is not None:
                        if memory.embedder is not None:
                            memory.embedder.clear_cache()  # every timed search embeds its question
                        if rewriter is not None:
                            rewriter.clear_cache()  # and asks the model
                        s0, c0, t0 = server.seconds(), time.process_time(), time.perf_counter()
                        hits = await mode_searcher.search(user, q["question"], limit=latency_limit)
                        latencies[mode].append(time.perf_counter() - t0)
                        cpu[mode].append(time.process_time() - c0)
                        s1 = server.seconds()
                        if s0 is not None and s1 is not None:
                            server_cpu[mode].append(s1 - s0)
                        if limit != latency_limit:  # the ranking to score, untimed
                            hits = await mode_searcher.search(user, q["question"], limit=limit)
                        retrieved = [_own_dia_id(str(h.memory.metadata.get("dia_id")), q["conv_id"]) for h in hits]
                    outs[path].write(json.dumps({"qid": q["qid"], "retrieved": retrieved}) + "\n")
        finally:
            for f in outs.values():
                f.close()
        embedder = memory.embedder.name if memory.embedder is not None else "none"
        rewrite_failures = sum(s.stats.search_rewrite_failures for _, s, _ in modes)  # only "rewrite" has a rewriter
    return {
        "turns": len(turns),
        "questions": len(questions),
        "store_seconds": store_seconds,
        "latency": {
            mode: {
                "p50_ms": 1000 * percentile(times, 0.5),
                "p95_ms": 1000 * percentile(times, 0.95),
                "cpu_ms": 1000 * sum(cpu[mode]) / len(cpu[mode]),
                "server_cpu_ms": 1000 * sum(server_cpu[mode]) / len(server_cpu[mode]) if server_cpu[mode] else None,
            }
            for mode, times in latencies.items()
        },
        "embedder": embedder,
        "refused": refused,
        "rewrite": None
        if rewriter is None
        else {"model": rewriter.label, "calls": rewriter.stats.calls, "failures": rewrite_failures},
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=Path, required=True)
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="predictions JSONL to write")
    ap.add_argument("--scorer", type=Path, help="score.py (default: beside --questions)")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--latency-limit", type=int, default=10, help="hits of the timed searches")
    ap.add_argument("--embedding-model", default="local", help="MEMORY_EMBEDDING_MODEL for this run")
    ap.add_argument("--data-dir", type=Path, help="embedded PostgreSQL directory (default: a temporary one)")
    ap.add_argument("--one-user", action="store_true", help="every conversation as one user's history")
    ap.add_argument("--compare", action="store_true", help="also search without the reranker (before/after in one run)")
    ap.add_argument(
        "--before",
        action="store_true",
        help="also search with the previous reranker (dbc76bb's weights, one set for every question)",
    )
    ap.add_argument(
        "--rewrite-model",
        help="also search with the LLM rewrite of the question by this pydantic-ai model (e.g. openai:gpt-4o-mini)",
    )
    args = ap.parse_args(argv)
    wall = time.perf_counter()
    hybrid_out = args.out.with_name(args.out.stem + "-hybrid" + args.out.suffix) if args.compare else None
    before_out = args.out.with_name(args.out.stem + "-before" + args.out.suffix) if args.before else None
    rewrite_out = args.out.with_name(args.out.stem + "-rewrite" + args.out.suffix) if args.rewrite_model else None
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        overrides: dict[str, Any] = {"embedding_model": args.embedding_model}
        base = MemorySettings()
        if base.database_url is None:
            overrides["data_dir"] = args.data_dir or Path(tmp)
        settings = base.model_copy(update=overrides)
        try:
            timings = asyncio.run(
                run(
                    args.turns,
                    args.questions,
                    args.out,
                    settings,
                    limit=args.limit,
                    one_user=args.one_user,
                    compare_path=hybrid_out,
                    before_path=before_out,
                    latency_limit=args.latency_limit,
                    rewrite_path=rewrite_out,
                    rewrite_model=_stand_in_model() if args.rewrite_model == STAND_IN else args.rewrite_model,
                )
            )
        except RewriteModelUnavailable as exc:
            print(f"bench.locomo: {exc}", file=sys.stderr)
            return 2
    scorer = args.scorer or args.questions.parent / "score.py"
    history = "one user holding every conversation" if args.one_user else "one user per conversation"
    print(f"\nLoCoMo turn retrieval — {timings['turns']} turns, {timings['questions']} questions, {history}, "
          f"embedder {timings['embedder']}\n")  # fmt: skip
    if scorer.exists():
        runs = (
            ("without the reranker (hybrid order)", hybrid_out),
            ("with the previous reranker (dbc76bb: one set of weights)", before_out),
            ("with the reranker", args.out),
            (f"with the reranker and the LLM rewrite ({args.rewrite_model})", rewrite_out),
        )
        for label, path in runs:
            if path is None:
                continue
            if hybrid_out is not None or before_out is not None or rewrite_out is not None:
                print(f"\n{label}:")
            subprocess.run(
                [sys.executable, str(scorer), "--questions", str(args.questions), "--pred", str(path), "--ks",
                 "1,5,10,20,50"],
                check=True,
            )  # fmt: skip
    else:
        print(f"(no scorer at {scorer}; predictions in {args.out})")
    print()
    print("| measure | value |\n|---|---:|")
    print(f"| store all turns (remember_many, embeddings included) | {timings['store_seconds']:.1f} s |")
    labels = {"after": "reranker", "hybrid": "without the reranker", "before": "previous reranker (dbc76bb)",
              "rewrite": f"reranker + LLM rewrite ({args.rewrite_model})"}  # fmt: skip
    after = timings["latency"]["after"]
    for mode, t in timings["latency"].items():
        server = f"{t['server_cpu_ms']:.1f} ms" if t["server_cpu_ms"] is not None else "n/a"
        print(f"| search p50 / p95, limit {args.latency_limit}, question embedding included, {labels[mode]} | "
              f"{t['p50_ms']:.1f} / {t['p95_ms']:.1f} ms |")  # fmt: skip
        print(f"| CPU per search ({labels[mode]}): this process / the database server | {t['cpu_ms']:.1f} / {server} |")
        if mode != "after":
            print(f"| ratio p50 / p95, reranker / {labels[mode]} | {after['p50_ms'] / t['p50_ms']:.2f} / "
                  f"{after['p95_ms'] / t['p95_ms']:.2f} |")  # fmt: skip
    if (rewrite := timings["rewrite"]) is not None:
        print(f"| rewrite model calls / failures (a failure searched the question alone) | {rewrite['calls']} / "
              f"{rewrite['failures']} |")  # fmt: skip
    print(f"| turns refused by the privacy policy (skipped) | {len(timings['refused'])} |")
    print(f"| whole run, wall | {time.perf_counter() - wall:.1f} s |")
    for line in timings["refused"]:
        print(f"- refused {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
