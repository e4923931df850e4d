"""The import contract: the library (`memory_plugin`) never imports the worked example (`agents`, `workflows`), at
any depth (a function-level import counts), and the built wheel installs only the library. Read statically with
`tests/import_graph.py`."""

from __future__ import annotations

import tomllib
from pathlib import Path

from import_graph import ROOT, ImportGraph, read_graph

LIBRARY = "memory_plugin"
SHOP = ("agents", "workflows")


def _top(module: str) -> str:
    return module.split(".")[0]


def forbidden_edges(graph: ImportGraph, root: Path = ROOT) -> list[str]:
    """Every import from a library module to a shop module, as `source -> target  (file:line)`, sorted."""
    return sorted(
        edge.describe(root)
        for source, targets in graph.edges.items()
        if _top(source) == LIBRARY
        for target, edge in targets.items()
        if _top(target) in SHOP
    )


def test_the_library_never_imports_the_shop() -> None:
    forbidden = forbidden_edges(read_graph())
    assert not forbidden, "the library imports the shop:\n" + "\n".join(forbidden)


def test_the_contract_catches_a_function_level_import_of_the_shop(tmp_path: Path) -> None:
    files = {
        "memory_plugin/__init__.py": "",
        "memory_plugin/cli.py": "def run() -> None:\n    from workflows.budget import W\n",
        "workflows/__init__.py": "",
        "workflows/budget.py": "from memory_plugin import cli\n\nW = cli\n",  # shop -> library is allowed
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = read_graph(tmp_path, ("memory_plugin", "workflows"))
    assert sorted(forbidden_edges(graph, tmp_path)) == [  # the graph's edges come out of a set: any order
        "memory_plugin.cli -> workflows  (memory_plugin/cli.py:2)",  # the package's __init__ runs first
        "memory_plugin.cli -> workflows.budget  (memory_plugin/cli.py:2)",
    ]


def test_the_wheel_installs_only_the_library() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [LIBRARY]
    # The shop stays type-checked, and its commands registered from its side.
    assert set(SHOP) <= set(config["tool"]["mypy"]["packages"])
    assert config["tool"]["memory-plugin"]["cli-plugins"] == ["workflows.cli"]
