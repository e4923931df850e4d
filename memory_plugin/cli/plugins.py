"""Commands of applications, registered on the `memory-plugin` command line from the application's side.

The library knows no application: an application adds its commands with a module that has a
`register(app: typer.Typer) -> None` function, named in any of

- the `memory_plugin.cli` entry point group of an installed distribution (`[project.entry-points."memory_plugin.cli"]
  shop = "mypackage.cli:register"`);
- `[tool.memory-plugin] cli-plugins = ["mypackage.cli"]` in the `pyproject.toml` of the current directory or its
  nearest parent that has one (a checkout; its directory is put on `sys.path` if the module is not importable);
- `MEMORY_CLI_PLUGINS` (comma-separated `module` or `module:function`).

A plugin that cannot be imported is skipped with a warning on stderr: the library's own commands keep working.
"""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import typer

from .common import err

__all__ = ["ENTRY_POINT_GROUP", "plugin_references", "register_plugins"]

ENTRY_POINT_GROUP = "memory_plugin.cli"


def _project_plugins(start: Path) -> tuple[list[str], Path | None]:
    """`[tool.memory-plugin] cli-plugins` of the nearest `pyproject.toml` at or above `start`, and its folder."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                return [], None
            plugins = config.get("tool", {}).get("memory-plugin", {}).get("cli-plugins", [])
            return [str(p) for p in plugins], folder
    return [], None


def plugin_references(cwd: Path | None = None) -> tuple[list[str], Path | None]:
    """Every plugin named (entry points, the project's pyproject, `MEMORY_CLI_PLUGINS`), first mention first, and
    the project folder the pyproject was found in."""
    named = [f"{ep.module}:{ep.attr}" if ep.attr else ep.module for ep in entry_points(group=ENTRY_POINT_GROUP)]
    project, folder = _project_plugins((cwd or Path.cwd()).resolve())
    named += project
    named += [p.strip() for p in os.environ.get("MEMORY_CLI_PLUGINS", "").split(",") if p.strip()]
    return list(dict.fromkeys(named)), folder


def _load(reference: str, folder: Path | None) -> Callable[[typer.Typer], Any]:
    module_name, _, function = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if folder is None or exc.name != module_name.split(".")[0] or str(folder) in sys.path:
            raise
        sys.path.insert(0, str(folder))  # a checkout run from outside its own environment
        module = importlib.import_module(module_name)
    register: Callable[[typer.Typer], Any] = getattr(module, function or "register")
    return register


def register_plugins(app: typer.Typer, cwd: Path | None = None) -> list[str]:
    """Register every plugin's commands on `app`; returns the references registered."""
    done: list[str] = []
    references, folder = plugin_references(cwd)
    for reference in references:
        try:
            _load(reference, folder)(app)
        except Exception as exc:  # a broken plugin must not take the library's commands down
            err().print(f"[yellow]warning:[/] the command-line plugin {reference} was not loaded: {exc}")
            continue
        done.append(reference)
    return done
