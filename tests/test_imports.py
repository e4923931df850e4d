"""Every module imports on its own, and the import graph of the project's packages has no cycle.

The checker (tests/import_graph.py) is also a command: `python -m tests.import_graph [--fresh]`.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from import_graph import ROOT, find_cycles, format_cycles, read_graph


def test_the_import_graph_has_no_cycle() -> None:
    graph = read_graph()
    assert len(graph.modules) > 50  # the packages were found
    assert not find_cycles(graph), format_cycles(graph)


@pytest.mark.slow
def test_every_module_imports_on_its_own_in_a_fresh_interpreter() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.import_graph", "--fresh"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no import cycle" in result.stdout


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_cycle_closed_by_a_package_init_is_found_with_the_lines_that_make_it(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .store import Store\n",
            "pkg/store/__init__.py": "from .memory import Store\n",
            "pkg/store/memory.py": "from ..search import rank\nclass Store: ...\n",
            "pkg/search.py": "from pkg.store.rows import Row\n\ndef rank(): ...\n",
            "pkg/store/rows.py": "class Row: ...\n",
        },
    )
    graph = read_graph(tmp_path, ("pkg",))
    (cycle,) = find_cycles(graph)
    # search imports store.rows, which runs store/__init__, which imports memory, which imports search.
    assert {(edge.source, edge.target) for edge in cycle} == {
        ("pkg.search", "pkg.store"),
        ("pkg.store", "pkg.store.memory"),
        ("pkg.store.memory", "pkg.search"),
    }
    report = format_cycles(graph, tmp_path)
    assert "pkg/search.py:1" in report
    assert "pkg/store/memory.py:1" in report


def test_type_checking_imports_and_a_modules_own_packages_make_no_cycle(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            # An __init__ re-exporting its submodules, which import each other through their own package.
            "pkg/__init__.py": "from .a import A\nfrom .b import B\n",
            "pkg/a.py": "from pkg.b import B\nA = B\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\nelse:\n"
                "    import json\nB = 1\n"
            ),
        },
    )
    assert find_cycles(read_graph(tmp_path, ("pkg",))) == []
    # Counted with the type-only imports, the same files close a circle: `types=True` sees it.
    (cycle,) = find_cycles(read_graph(tmp_path, ("pkg",), types=True))
    assert {edge.source for edge in cycle} == {"pkg.a", "pkg.b"}


def test_type_only_imports_form_no_circle_either() -> None:
    # The facade hands itself to its parts through protocols (`runtime/turn.TurnMemory`), not by naming itself.
    graph = read_graph(types=True)
    assert not find_cycles(graph), format_cycles(graph)


def test_a_name_read_from_a_half_initialised_package_is_a_cycle(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\nHELPER = 1\n",
            "pkg/a.py": "def f():\n    from . import HELPER\n    return HELPER\nA = 1\n",
        },
    )
    (cycle,) = find_cycles(read_graph(tmp_path, ("pkg",)))
    assert {(edge.source, edge.target) for edge in cycle} == {("pkg", "pkg.a"), ("pkg.a", "pkg")}


def test_the_fresh_import_check_names_a_module_that_fails_on_its_own(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\n",
            "pkg/a.py": "from .b import B\nA = 1\n",
            "pkg/b.py": "from pkg import A\nB = 2\n",  # pkg is half-initialised: A is not there yet
            "other/__init__.py": "",
            "other/fine.py": "X = 1\n",
        },
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "import_graph.py"), "--fresh", "--packages", "pkg,other", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "pkg.b does not import on its own" in result.stdout
    assert "ImportError" in result.stdout
    assert "other.fine does not import" not in result.stdout
    assert "import cycle 1 of 1" in result.stdout
