"""The library's import contract, read statically (`tests/import_graph.py`'s graph): which way imports may point.

Run from the repository root: `python -m tests.import_contract` prints every import that breaks the contract
(or "import contract kept: 0 arrows back up") and exits 1 if there is any. `tests/test_import_contract.py` runs
the same checks in the suite.

The contract, from the bottom of the house to the top (`LAYERS`):
- **leaf** modules (`LEAF`: errors, rows, models, text, dates, logs, …) import only other leaf modules;
- **rules** (`RULES`: ranking, quality, privacy, and the pure parts of retrieval, extraction and context) import
  only leaf modules, `settings` (configuration: values, no I/O) and other rules — never a store, the database,
  an embedder, a queue or a model client;
- `database` (the driver plumbing: server, migrations, roles, calls) never imports a store or the outage layer;
- every import between two top-level parts of `memory_plugin` points down `LAYERS` (an import up the list is an
  "arrow back up": it ties the two parts together, whatever imports what inside them);
- the library (`memory_plugin`) never imports the shop (`agents/`, `workflows/`: the worked example).

Imports under `if TYPE_CHECKING:` are types only and never run: they are not edges (a service may name the store
protocol it is handed without importing the store). An edge to a package's `__init__` made only on the way to one
of its submodules is not counted by the rules checks (the submodule is checked itself).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

try:  # under pytest, tests/ is on the path; as `python -m tests.import_contract`, the repository root is
    from import_graph import ROOT, Import, ImportGraph, read_graph
except ModuleNotFoundError:
    from tests.import_graph import ROOT, Import, ImportGraph, read_graph

__all__ = ["LAYERS", "LEAF", "LIBRARY", "RULES_MODULES", "SHOP", "contract_violations", "is_rule", "main", "report"]

LIBRARY = "memory_plugin"
SHOP = ("agents", "workflows")
"""The worked example application: the library never imports it."""

LEAF = frozenset(
    f"{LIBRARY}.{name}"
    for name in (
        "backoff",
        "dates",
        "errors",
        "failures",
        "logs",
        "models",
        "rows",
        "stats",
        "taxonomy",
        "text",
        "validation",
    )
)
"""Modules every layer may use and that use nothing above them."""

CONFIG = frozenset({f"{LIBRARY}.settings"})
"""Configuration values (the package and its group modules): rules may read them (settings itself reads the rules'
defaults)."""

RULES_PACKAGES = (f"{LIBRARY}.quality", f"{LIBRARY}.privacy", f"{LIBRARY}.crypto")
"""Packages made of rules only (every module in them)."""

RULES_MODULES = frozenset(
    f"{LIBRARY}.{name}"
    for name in (
        "conversions",  # rows <-> models, with the decay applied on read
        "formatting",  # a MemoryContext rendered as text
        "ranking",  # the fact ranking (the Python twin of memory_rank_facts)
        "retrieval",  # the package re-exports only the rules below
        "retrieval.query",
        "retrieval.rerank",
        "retrieval.scored",
        "retrieval.search",
        "retrieval.weights",
        # not retrieval.searcher: the service that embeds the question and calls the store it is given
        "extraction.base",
        "extraction.policy",
        "extraction.rules",
        "extraction.statement_rules",
        "extraction.third_person",
        # not extraction.llm (a model client) nor extraction.runner (the service over stores and queues)
        "context.budget",
        "context.history",
        "context.lines",
        "context.receipt",
        "context.slots",
        "context.summary",
        "context.tokens",
        # not context.builder/reader/store/summarizer: the I/O around the pure assembly
        "retention.policy",
        # not retention.purge: the deletes
    )
)
"""Rules named one by one where a package mixes rules and the services that apply them."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "leaf",
        (
            "errors",
            "text",
            "rows",
            "logs",
            "dates",
            "stats",
            "validation",
            "failures",
            "models",
            "taxonomy",
            "backoff",
        ),
    ),
    ("rules", ("quality", "privacy", "crypto", "settings", "ranking", "retrieval", "conversions")),
    ("database", ("database",)),
    ("stores and adapters", ("store", "embeddings", "outage", "session", "background", "consent")),
    ("services", ("write", "extraction", "context", "formatting", "chats", "export", "retention")),
    ("assembly and facade", ("runtime", "manager")),
    ("faces", ("tools", "lifetime", "capability", "api", "dashboard", "api.server", "cli", "")),
)
"""Top-level parts of `memory_plugin` from the bottom up: an import between two of them points down this list
(within a layer too: the order is the one the code follows today). `""` is `memory_plugin/__init__.py`."""


OWN_PARTS = {f"{LIBRARY}.api.server": "api.server"}
"""Modules placed on their own: `api/server.py` composes the HTTP app (the API's routes and the dashboard, which
sits on the API's services), so it is above both."""


def part(module: str) -> str:
    """The top-level part of `memory_plugin` a module belongs to (`memory_plugin.store.postgres` -> `store`)."""
    return OWN_PARTS.get(module) or (module.split(".")[1] if module.count(".") else "")


def is_rule(module: str) -> bool:
    """True for the modules the contract holds to be pure rules."""
    return module in RULES_MODULES or any(module == p or module.startswith(p + ".") for p in RULES_PACKAGES)


def _is_package(graph: ImportGraph, module: str) -> bool:
    return graph.modules[module].name == "__init__.py"


def _library_edges(graph: ImportGraph) -> Iterable[Import]:
    for source, targets in graph.edges.items():
        if source == LIBRARY or source.startswith(LIBRARY + "."):
            yield from targets.values()


def unknown_parts(graph: ImportGraph) -> list[str]:
    """Top-level parts of `memory_plugin` that `LAYERS` does not place (a new one must be placed)."""
    placed = {name for _, names in LAYERS for name in names}
    return sorted({part(m) for m in graph.modules if m.startswith(LIBRARY)} - placed)


def contract_violations(graph: ImportGraph) -> dict[str, list[Import]]:
    """The imports that break each clause of the contract (empty lists: kept)."""
    order = {name: i * 100 + j for i, (_, names) in enumerate(LAYERS) for j, name in enumerate(names)}
    found: dict[str, list[Import]] = {
        "library -> shop": [],
        "leaf -> above": [],
        "rules -> stores/database/embedder/I/O": [],
        "database -> store/outage": [],
        "arrow back up": [],
    }
    for edge in _library_edges(graph):
        source, target = edge.source, edge.target
        if target.split(".", 1)[0] in SHOP:
            found["library -> shop"].append(edge)
            continue
        if not target.startswith(LIBRARY):
            continue
        on_the_way = _is_package(graph, target) and any(t.startswith(target + ".") for t in graph.edges[source])
        if source in LEAF and target not in LEAF and not on_the_way:
            found["leaf -> above"].append(edge)
        config = any(target == c or target.startswith(c + ".") for c in CONFIG)  # the package or a group module
        if is_rule(source) and not (is_rule(target) or target in LEAF or config or on_the_way):
            found["rules -> stores/database/embedder/I/O"].append(edge)
        if part(source) == "database" and part(target) in ("store", "outage"):
            found["database -> store/outage"].append(edge)
        a, b = part(source), part(target)
        if a != b and a in order and b in order and order[a] < order[b]:
            found["arrow back up"].append(edge)
    return found


def report(graph: ImportGraph, root: Path = ROOT) -> tuple[str, int]:
    """The text `main` prints and the number of imports that break the contract."""
    lines: list[str] = []
    unknown = unknown_parts(graph)
    if unknown:
        lines.append(f"parts of {LIBRARY} not placed in LAYERS (tests/import_contract.py): {', '.join(unknown)}")
    count = len(unknown)
    for clause, edges in contract_violations(graph).items():
        count += len(edges)
        if edges:
            lines.append(f"{clause}: {len(edges)}")
            lines += [f"  {edge.describe(root)}" for edge in sorted(edges, key=lambda e: (e.source, e.target))]
    if not count:
        lines.append("import contract kept: 0 arrows back up")
    return "\n".join(lines), count


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tests.import_contract [--types] [ROOT]`: print the imports that break the contract; exit 1 if
    any. `--types`: count the imports under `if TYPE_CHECKING:` too (for a look: the contract itself does not)."""
    args = list(sys.argv[1:] if argv is None else argv)
    types = "--types" in args
    args = [a for a in args if a != "--types"]
    root = Path(args[0]).resolve() if args else ROOT
    text, count = report(read_graph(root, (LIBRARY, *SHOP), types=types), root)
    print(text)
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
