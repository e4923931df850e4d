"""The command line as a health check and a clear first report: `status`'s exit code, options on either side of
the subcommand."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_plugin.cli import app
from memory_plugin.cli.status import DEGRADED_EXIT_CODE

WIDE = {"COLUMNS": "200"}
CLOSED_PORT = "postgresql://postgres@127.0.0.1:1/memory_plugin?connect_timeout=1"


def test_status_exits_zero_when_the_database_answers(database_url: str, tmp_path: Path) -> None:
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "MEMORY_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, ["status"], env=env)

    assert result.exit_code == 0, result.output
    assert "postgres_reachable True" in " ".join(result.output.split())


@pytest.mark.slow
def test_status_exits_non_zero_when_memory_is_served_degraded(tmp_path: Path) -> None:
    env = {**WIDE, "MEMORY_DATABASE_URL": CLOSED_PORT, "MEMORY_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, ["status"], env={**env, "MEMORY_CONNECT_TIMEOUT_SECONDS": "1"})

    assert result.exit_code == DEGRADED_EXIT_CODE != 0, result.output
    assert "fallback" in result.output  # the table is still printed: the exit code adds to it


def test_status_help_documents_the_exit_codes() -> None:
    result = CliRunner().invoke(app, ["status", "--help"], env=WIDE)

    assert "3 degraded" in " ".join(result.output.split())


@pytest.mark.parametrize("args", [["--verbose", "status"], ["status", "--verbose"], ["-v", "status"], ["status", "-v"]])
def test_verbose_works_on_either_side_of_the_subcommand(args: list[str], database_url: str, tmp_path: Path) -> None:
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "MEMORY_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, args, env=env)

    assert result.exit_code == 0, result.output
    assert "backend" in result.output


@pytest.mark.parametrize("before", [True, False])
def test_data_dir_works_on_either_side_of_the_subcommand(before: bool, tmp_path: Path) -> None:
    data_dir = tmp_path / "db"
    args = ["--data-dir", str(data_dir), "journal"] if before else ["journal", "--data-dir", str(data_dir)]
    # `journal` reads a local file only: the embedded database is never started.
    result = CliRunner().invoke(app, args, env={**WIDE, "MEMORY_DATABASE_URL": None, "MEMORY_DATA_DIR": None})

    assert result.exit_code == 0, result.output
    assert f"journal {data_dir}" in result.output
