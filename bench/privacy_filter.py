"""The privacy filter measured: time on adversarial input, precision and recall of the health rule, and what it
changes in everyday conversation.

    python -m bench.privacy_filter [--turns ../shared/bench/locomo/turns_dev.jsonl] [--repeat 7]

1. Timing: `redact_sensitive` (secrets) and `redact_note_text` (the whole filter for a verbatim note) on 500,
   2,000 and 20,000 characters of each adversarial input (digit groups, long runs, near-miss formats, health
   words) and of everyday prose, the median of `--repeat` runs, in ms of CPU time (wall time on a shared machine
   mostly measures the other jobs). Linear time shows as ~10x from 2,000 to 20,000 characters. The target is
   <= 5 ms for the whole filter on 20,000 characters; bench/README.md has the last measured table.
2. The labelled health statements of `tests/data/health_statements.jsonl` (the speaker's own clinical detail
   vs the confusable kinds): precision and recall of `redact_note_text`'s health rule, per split.
3. LoCoMo's dev turns (everyday English chat, read in place, never copied): how many turns the note filter
   changes and drops, against how many the fact rule (`sanitize_fact_text`) would change or drop.

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path

from memory_plugin.privacy import redact_note_text, redact_sensitive, sanitize_fact_text

HEALTH_SET = Path(__file__).resolve().parents[1] / "tests" / "data" / "health_statements.jsonl"
SIZES = (500, 2_000, 20_000)


def _find_locomo_turns() -> Path | None:
    """`shared/bench/locomo/turns_dev.jsonl` next to a parent of this checkout (worktrees sit one level deeper)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "bench" / "locomo" / "turns_dev.jsonl"
        if candidate.is_file():
            return candidate
    return None


def _repeat_to(pattern: str, size: int) -> str:
    return (pattern * (size // len(pattern) + 1))[:size]


def _mixed_separators(size: int) -> str:
    rng = random.Random(13)
    separators = ["", " ", "  ", "-", ".", "/", "\u00a0"]
    return "".join(rng.choice("0123456789") + rng.choice(separators) for _ in range(size))[:size]


_SPARSE_CLINICAL = (
    "Honestly I think that maybe my mom and I have diabetes now, but we walked along the shore and my sister"
    " said the weekend plans were fine we walked along the shore and my sister said the weekend plans were fine"
    " we walked along the shore and my sister said the weekend pla. "
)

ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "digit groups (one run)": lambda n: _repeat_to("4111 1111 1111 111 ", n),
    "card-shaped, Luhn-failing": lambda n: _repeat_to("4444 4444 4444 4444 x ", n),
    "digits, random separators": _mixed_separators,
    "one long number": lambda n: "7" * n,
    "long alphanumeric run": lambda n: _repeat_to("aB3", n),
    "IBAN near misses": lambda n: _repeat_to("es91 2100 0418 4502 0005 1333 ", n),
    "DNI near misses": lambda n: _repeat_to("DNI 12345678 A ", n),
    "SSN near misses": lambda n: _repeat_to("SSN 123 45 678 ", n),
    "password keywords": lambda n: _repeat_to("password of the portal is: ", n),
    "key prefixes": lambda n: _repeat_to("key sk_live_ AIza token= ", n),
    "health words": lambda n: _repeat_to("I think my mom has diabetes and I take 850 mg of covid ", n),
    # The densest clinical text still read word by word (one term per 272 characters, owners, other people
    # and hypotheticals around each): the health rule's most expensive input.
    "clinical words, one per 272 characters": lambda n: _repeat_to(_SPARSE_CLINICAL, n),
    "everyday prose": lambda n: _repeat_to("I went to the lake with Mel and the kids on Sunday, so fun! ", n),
}


def _median_ms(func: Callable[[], object], repeat: int) -> float:
    # CPU time of this process: on a machine shared by other jobs, wall time mostly measures their load.
    return statistics.median(timeit.repeat(func, number=1, repeat=repeat, timer=time.process_time)) * 1000


def timing_table(repeat: int) -> None:
    print(f"## CPU time (ms, median of {repeat}) on adversarial input\n")
    header = " | ".join(f"{size:,} secrets | {size:,} whole" for size in SIZES)
    print(f"| input | {header} |")
    print("|---|" + "---:|" * (2 * len(SIZES)))
    for name, make in ADVERSARIAL.items():
        cells: list[str] = []
        for size in SIZES:
            text = make(size)
            for func in (redact_sensitive, redact_note_text):
                cells.append(f"{_median_ms(partial(func, text), repeat):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def health_table() -> None:
    rows = [json.loads(line) for line in HEALTH_SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    print(f"## Health rule on {HEALTH_SET.name} ({len(rows)} sentences)\n")
    print("| split | sentences | own clinical | fired | true pos. | false pos. | missed | precision | recall |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for split in [*sorted({r["split"] for r in rows}), "all"]:
        chosen = [r for r in rows if split in ("all", r["split"])]
        tp = fp = fn = 0
        for row in chosen:
            fired = bool(redact_note_text(row["text"]).clinical)
            own = row["label"] == "own_clinical"
            tp += fired and own
            fp += fired and not own
            fn += own and not fired
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        own_count = sum(r["label"] == "own_clinical" for r in chosen)
        counts = f"{len(chosen)} | {own_count} | {tp + fp} | {tp} | {fp} | {fn}"
        print(f"| {split} | {counts} | {precision:.3f} | {recall:.3f} |")
    print()


def locomo_table(turns_path: Path) -> None:
    texts = [json.loads(line)["text"] for line in turns_path.read_text(encoding="utf-8").splitlines() if line]
    note_changed = note_dropped = fact_changed = fact_dropped = 0
    examples: list[str] = []
    for text in texts:
        note = redact_note_text(text)
        if note.text is None:
            note_dropped += 1
            examples.append(f"dropped: {text[:120]!r}")
        elif note.text != text:
            note_changed += 1
            examples.append(f"changed: {text[:120]!r} -> {note.text[:120]!r}")
        fact = sanitize_fact_text(text, "fact")
        if fact.text is None:
            fact_dropped += 1
        elif fact.text != text:
            fact_changed += 1
    print(f"## LoCoMo dev turns ({len(texts):,}, {turns_path})\n")
    print("| filter | changed | dropped |")
    print("|---|---:|---:|")
    print(f"| redact_note_text (verbatim notes) | {note_changed} | {note_dropped} |")
    print(f"| sanitize_fact_text (extracted facts' rule, for comparison) | {fact_changed} | {fact_dropped} |")
    print()
    for example in examples[:20]:
        print(f"- {example}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=Path, default=_find_locomo_turns())
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    timing_table(args.repeat)
    health_table()
    if args.turns is None or not args.turns.is_file():
        print("LoCoMo turns not found: pass --turns path/to/turns_dev.jsonl")
    else:
        locomo_table(args.turns)


if __name__ == "__main__":
    main()
