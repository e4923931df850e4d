"""Applications' commands on the command line (`memory_plugin/cli/plugins.py`): the library registers none of its
own accord; the shop's `demo` and `chat` come from the repository's pyproject.toml; the generic vocabulary unless
`MEMORY_VOCABULARY_MODULE` names one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agents.vocabulary import SHOP_VOCABULARY
from memory_plugin.cli.common import load_settings
from memory_plugin.cli.plugins import plugin_references, register_plugins
from memory_plugin.quality.vocabulary import DEFAULT_VOCABULARY

ROOT = Path(__file__).resolve().parents[1]


def _help(cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("MEMORY_CLI_PLUGINS", None)
    done = subprocess.run(
        [sys.executable, "-c", "from memory_plugin.cli import app; app()", "--help"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.slow
def test_the_shops_commands_come_from_the_checkouts_pyproject_only(tmp_path: Path) -> None:
    in_checkout = _help(ROOT)
    elsewhere = _help(tmp_path)  # no pyproject naming a plugin: the library's commands only
    for command in ("inspect", "status", "worker", "serve", "db-url"):
        assert command in in_checkout
        assert command in elsewhere
    for command in ("demo", "chat"):
        assert f" {command} " in in_checkout
        assert f" {command} " not in elsewhere


def test_plugins_are_named_by_the_nearest_pyproject_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.memory-plugin]\ncli-plugins = ["myshop.cli"]\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.setenv("MEMORY_CLI_PLUGINS", "other.cli:add_commands, myshop.cli")
    references, folder = plugin_references(tmp_path / "sub")
    assert references[-2:] == ["myshop.cli", "other.cli:add_commands"]
    assert folder == tmp_path


def test_a_plugin_registers_from_its_project_and_a_broken_one_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "myshop_plugin_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text(
        "import typer\n\ndef register(app: typer.Typer) -> None:\n"
        "    @app.command('hello')\n    def hello() -> None:\n        typer.echo('hola desde la tienda')\n"
    )
    (tmp_path / "pyproject.toml").write_text('[tool.memory-plugin]\ncli-plugins = ["myshop_plugin_test.cli"]\n')
    monkeypatch.setenv("MEMORY_CLI_PLUGINS", "no_such_module_here")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the project folder is added for the import
    app = typer.Typer()

    @app.command("noop")
    def noop() -> None:  # a second command, so typer keeps subcommands
        pass

    assert register_plugins(app, tmp_path) == ["myshop_plugin_test.cli"]
    assert CliRunner().invoke(app, ["hello"]).output == "hola desde la tienda\n"


def test_worker_and_serve_settings_use_the_generic_vocabulary_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MEMORY_VOCABULARY_MODULE", raising=False)
    assert load_settings(None).vocabulary is DEFAULT_VOCABULARY
    monkeypatch.setenv("MEMORY_VOCABULARY_MODULE", "agents.vocabulary:SHOP_VOCABULARY")
    assert load_settings(None).vocabulary is SHOP_VOCABULARY
    monkeypatch.setenv("MEMORY_VOCABULARY_MODULE", "agents.vocabulary:MATERIAL_NAMES")
    with pytest.raises(typer.Exit):
        load_settings(None)
