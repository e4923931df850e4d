"""The benchmarks' printed tables: `BenchTable` and its markdown rendering, shared by every bench module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console

__all__ = ["BenchTable", "percentile", "render", "to_markdown"]


@dataclass(slots=True)
class BenchTable:
    """One printed table: a title, column headers, rows of already formatted cells and notes below."""

    key: str
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    """Preformatted lines printed after the table (a query plan)."""

    def row_labels(self) -> list[str]:
        """The first cell of every row."""
        return [row[0] for row in self.rows]


def to_markdown(table: BenchTable) -> str:
    """The table as markdown: a heading, a pipe table with aligned columns, its notes and code block."""
    widths = [max(len(cell) for cell in column) for column in zip(table.columns, *table.rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))]
        return "| " + " | ".join(padded) + " |"

    separator = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    out = [f"### {table.title}", "", line(table.columns), separator, *(line(row) for row in table.rows)]
    for note in table.notes:
        out += ["", f"_{note}_"]
    if table.code:
        out += ["", "```", *table.code, "```"]
    return "\n".join(out)


def render(tables: Sequence[BenchTable], console: Console) -> None:
    """Print the tables as markdown."""
    for table in tables:
        console.print("\n" + to_markdown(table), markup=False, highlight=False, soft_wrap=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, the nearest sample by rank (0.0 for no values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0
