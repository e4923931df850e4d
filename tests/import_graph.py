"""The project's import graph, read statically, and the cycles in it.

Run from the repository root: `python -m tests.import_graph` (or `python tests/import_graph.py`) prints
"no import cycle" and exits 0, or prints each cycle, one import per line with its file and line, and exits 1.

Rules (what counts as "module A imports module B"):
- every `import` and `from ... import` in A's file, at any depth (a function-level import is a dependency
  too: it only delays the cycle), except those under `if TYPE_CHECKING:` (never executed);
- relative imports are resolved against A's package;
- importing `a.b.c` imports `a`, `a.b` and `a.b.c` (Python runs each package's `__init__` first, which is
  how re-exports in `__init__` files close cycles); `from a.b import c` also imports `a.b.c` when `c` is a
  submodule;
- except A's own ancestor packages, which Python has always started initialising before A: reaching
  `a.b` on the way to `a.b.c` from inside `a/b/x.py` adds no edge. Taking a *name* from an ancestor's
  `__init__` (`from .. import helper`, `from a import Thing`) is an edge: it reads a half-initialised module.
Only modules of the project's packages are nodes; third-party and standard library imports are ignored.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import multiprocessing
import sys
import traceback
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PACKAGES", "Import", "ImportGraph", "find_cycles", "import_each_fresh", "main", "read_graph"]

PACKAGES = ("memory_plugin", "agents", "workflows", "bench")
"""The top-level packages whose modules form the graph."""

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Import:
    """One edge: `source` imports `target` at `path:line`."""

    source: str
    target: str
    path: Path
    line: int

    def describe(self, root: Path) -> str:
        """`source -> target  (file:line)`."""
        try:
            where = self.path.relative_to(root)
        except ValueError:
            where = self.path
        return f"{self.source} -> {self.target}  ({where}:{self.line})"


@dataclass
class ImportGraph:
    """Modules (dotted name -> file) and the imports between them (first occurrence per pair)."""

    modules: dict[str, Path]
    edges: dict[str, dict[str, Import]]


def module_files(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every module of `packages` under `root`, by dotted name (a package by its `__init__.py`)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST, types: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Import statements of `tree` outside `if TYPE_CHECKING:` blocks (their `else:` branch counts); `types`:
    those inside too."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and not types:
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))
    return found


def _ancestors(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`]."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _from_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` statement in `module` names."""
    if not node.level:
        return node.module or ""
    package_parts = module.split(".") if is_package else module.split(".")[:-1]
    base_parts = package_parts[: len(package_parts) - (node.level - 1)]
    return ".".join([*base_parts, *([node.module] if node.module else [])])


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> set[str]:
    """The project modules `node` (a statement of `module`) makes Python import, as edges of the graph."""
    own_ancestors = {*_ancestors(module), module}
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return {m for name in names for m in (*_ancestors(name), name) if m in known} - own_ancestors
    base = _from_base(module, is_package, node)
    if base not in known:
        return set()
    submodules = {f"{base}.{alias.name}" for alias in node.names} & known.keys()
    targets = ({*_ancestors(base), base} & known.keys()) - own_ancestors
    if len(submodules) < len(node.names) and base != module:
        targets.add(base)  # names read from the (maybe half-initialised) `__init__` of an ancestor
    return targets | submodules


@functools.cache
def _file_imports(path: Path, mtime_ns: int, size: int, types: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The runtime imports (`types`: and the type-only ones) of the file at `path` as it is (its modification
    time and size are the key): the test run reads the repository's graph three times, and parsing ~400 files
    took ~1 s of CPU each time."""
    return _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), types)


def read_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES, *, types: bool = False) -> ImportGraph:
    """The static import graph of `packages` under `root` (see the module docstring for the rules); `types`:
    imports under `if TYPE_CHECKING:` are edges too (a circle of type-only imports ties modules together for a
    reader and for mypy, though it never runs)."""
    modules = module_files(root, packages)
    edges: dict[str, dict[str, Import]] = {name: {} for name in modules}
    for name, path in modules.items():
        status = path.stat()
        for node in _file_imports(path, status.st_mtime_ns, status.st_size, types):
            for target in _targets(name, path.name == "__init__.py", node, modules):
                known = edges[name].get(target)
                if known is None or node.lineno < known.line:
                    edges[name][target] = Import(name, target, path, node.lineno)
    return ImportGraph(modules, edges)


def _strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's components with more than one module, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            if children:
                child = children.pop(0)
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _shortest_cycle(graph: dict[str, dict[str, Import]], component: list[str]) -> list[Import]:
    """A shortest cycle through the component's first module, as its imports in order."""
    members = set(component)
    start = component[0]
    previous: dict[str, Import] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target, edge in sorted(graph[node].items()):
            if target not in members:
                continue
            if target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, previous[path[0].source])
                return path
            if target not in previous:
                previous[target] = edge
                queue.append(target)
    raise AssertionError(f"no cycle through {start} in its own strongly connected component")


def find_cycles(graph: ImportGraph) -> list[list[Import]]:
    """One shortest cycle per group of modules that import each other (empty: the graph is acyclic)."""
    return [_shortest_cycle(graph.edges, component) for component in _strongly_connected(graph.edges)]


def format_cycles(graph: ImportGraph, root: Path = ROOT) -> str:
    """The report `main` prints: each group of modules that import each other, and one cycle through it."""
    components = _strongly_connected(graph.edges)
    if not components:
        return "no import cycle"
    blocks = [
        f"import cycle {n} of {len(components)} ({len(component)} modules: {', '.join(component)}):\n"
        + "\n".join(f"  {edge.describe(root)}" for edge in _shortest_cycle(graph.edges, component))
        for n, component in enumerate(components, start=1)
    ]
    return "\n".join(blocks)


def _import_alone(packages: tuple[str, ...], module: str) -> str:
    """In a forked child without any module of `packages` loaded: import `module`; its traceback, or ""."""
    loaded = [name for name in sys.modules if name.split(".", 1)[0] in packages]
    assert not loaded, f"the parent left project modules loaded: {loaded}"
    try:
        importlib.import_module(module)
    except BaseException:
        return traceback.format_exc()
    return ""


def import_each_fresh(modules: Sequence[str], packages: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Import every module of `modules` on its own: module -> traceback of those that fail (empty: none).

    Each import runs in a child forked from this process after every module of `packages` has been dropped
    from `sys.modules`, so it starts from a clean package state (as `python -c "import m"` would) while the
    third-party libraries the parent loaded are shared: about 0.15 s of CPU per module instead of 1.4 s for a
    new interpreter. Call it in a process of its own (it imports everything first, to load those libraries).
    """
    for module in modules:  # load the third-party libraries once; failures are reported by the children
        with contextlib.suppress(BaseException):
            importlib.import_module(module)
    for name in [name for name in sys.modules if name.split(".", 1)[0] in packages]:
        del sys.modules[name]
    importlib.invalidate_caches()
    # One child per module (maxtasksperchild=1): no module sees what an earlier one loaded. Two at a time:
    # the machines this runs on have two cores.
    with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
        errors = pool.map(functools.partial(_import_alone, packages), modules, chunksize=1)
    return {module: error for module, error in zip(modules, errors, strict=True) if error}


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tests.import_graph [--fresh] [--packages a,b] [ROOT]`: print the import cycles (or "no import
    cycle") and, with `--fresh`, the modules that fail to import on their own. Exit status 1 if any."""
    parser = argparse.ArgumentParser(prog="python -m tests.import_graph", description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=ROOT, help="repository root (default: this one)")
    parser.add_argument("--fresh", action="store_true", help="also import every module on its own (~20 s)")
    parser.add_argument("--packages", default=",".join(PACKAGES), help="comma-separated top-level packages")
    parser.add_argument("--types", action="store_true", help="count imports under `if TYPE_CHECKING:` too")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    packages = tuple(args.packages.split(","))
    graph = read_graph(root, packages, types=args.types)
    print(format_cycles(graph, root))
    failed: dict[str, str] = {}
    if args.fresh:
        sys.path.insert(0, str(root))
        failed = import_each_fresh(sorted(graph.modules), packages)
        for module, error in failed.items():
            print(f"\n{module} does not import on its own:\n{error}")
        print(f"{len(graph.modules) - len(failed)} of {len(graph.modules)} modules import on their own")
    return 1 if find_cycles(graph) or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
