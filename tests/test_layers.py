"""The layered house stays layered: the import contract (`tests/import_contract.py`: leaf, rules, database,
layers, shop) holds on the real code, and its checks can fail.

The contract is also a command: `python -m tests.import_contract` prints any import that breaks it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from import_contract import LIBRARY, SHOP, contract_violations, is_rule, report, unknown_parts
from import_graph import ROOT, read_graph

GRAPH = read_graph(ROOT, (LIBRARY, *SHOP))
VIOLATIONS = contract_violations(GRAPH)


def test_every_part_of_the_library_has_a_place_in_the_layers() -> None:
    assert len(GRAPH.modules) > 50  # the packages were found
    assert unknown_parts(GRAPH) == []


@pytest.mark.parametrize("clause", sorted(VIOLATIONS))  # "library -> shop" is also tests/test_import_contract.py's
def test_no_import_breaks_the_contract(clause: str) -> None:
    edges = VIOLATIONS[clause]
    assert edges == [], f"{clause}:\n" + "\n".join(edge.describe(ROOT) for edge in edges)


def test_the_rules_named_in_the_contract_exist() -> None:
    rules = [m for m in GRAPH.modules if is_rule(m)]
    assert {"memory_plugin.retrieval.search", "memory_plugin.context.budget", "memory_plugin.quality.matching"} <= set(
        rules
    )
    assert not is_rule("memory_plugin.retrieval.searcher")
    assert not is_rule("memory_plugin.context.builder")


def test_each_clause_can_fail(tmp_path: Path) -> None:
    files = {
        "memory_plugin/__init__.py": "",
        "memory_plugin/errors.py": "from .store import Store\n",  # leaf -> above
        "memory_plugin/settings.py": "",
        "memory_plugin/ranking.py": "from memory_plugin.database import pool\n",  # rule -> database
        "memory_plugin/database/__init__.py": "from ..store.postgres import Store\npool = 1\n",  # database -> store
        "memory_plugin/store/__init__.py": "Store = 1\n",
        "memory_plugin/store/postgres.py": "from ..manager import M\nStore = 1\n",  # an arrow back up
        "memory_plugin/manager.py": "import agents\nM = 1\n",  # the library -> the shop
        "agents/__init__.py": "",
        "workflows/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    graph = read_graph(tmp_path, (LIBRARY, *SHOP))
    found = {clause: {(e.source, e.target) for e in edges} for clause, edges in contract_violations(graph).items()}
    assert ("memory_plugin.manager", "agents") in found["library -> shop"]
    assert ("memory_plugin.errors", "memory_plugin.store") in found["leaf -> above"]
    assert ("memory_plugin.ranking", "memory_plugin.database") in found["rules -> stores/database/embedder/I/O"]
    assert ("memory_plugin.database", "memory_plugin.store.postgres") in found["database -> store/outage"]
    assert ("memory_plugin.store.postgres", "memory_plugin.manager") in found["arrow back up"]
    text, count = report(graph, tmp_path)
    assert count >= 5
    assert "memory_plugin/store/postgres.py:1" in text
