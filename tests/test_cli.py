"""The `memory-plugin` command line, run in-process with typer's CliRunner."""

from __future__ import annotations

import re
from pathlib import Path
from uuid import uuid4

import pytest
from typer.testing import CliRunner

from memory_plugin.cli import DEMO_USER_ID, app

WIDE = {"COLUMNS": "200"}  # no wrapping inside the phrases the tests look for


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_demo_runs_offline_and_session_two_reuses_session_one(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--data-dir", str(tmp_path)], env=WIDE)

    assert result.exit_code == 0, result.output
    output = flat(result.output)
    session_1, _, session_2 = output.partition("Sesión 2")
    assert session_2, "the demo must have a second session"
    # Learned in session 1 (the table of stored facts)...
    assert "Prefiere aluminio 7075 para los prototipos" in session_1
    assert "Requiere certificación ISO 9001 en todas las piezas" in session_1
    # ...received by the model and used in its reply in session 2.
    panel, _, reply = session_2.partition("🤖 Arkcutt:")
    assert "No puede superar 1500€ por pedido" in panel
    for remembered in ("aluminio 7075", "ISO 9001", "1500 €"):
        assert remembered in reply, remembered
    assert f'psql "postgresql://postgres:@/memory_plugin?host={tmp_path}/postgres"' in output
    assert str(DEMO_USER_ID) in output


@pytest.mark.slow
def test_demo_starts_from_a_clean_slate_every_run(runner: CliRunner, tmp_path: Path) -> None:
    first = runner.invoke(app, ["demo", "--data-dir", str(tmp_path)], env=WIDE)
    second = runner.invoke(app, ["demo", "--data-dir", str(tmp_path)], env=WIDE)
    assert first.exit_code == second.exit_code == 0
    # Nothing is reinforced by the earlier run: the second run prints the same conversation and memory.
    assert second.output == first.output


def test_inspect_fresh_user_prints_an_empty_table(runner: CliRunner, database_url: str) -> None:
    user = uuid4()
    result = runner.invoke(app, ["inspect", "--user", str(user)], env={**WIDE, "MEMORY_DATABASE_URL": database_url})

    assert result.exit_code == 0, result.output
    output = flat(result.output)
    assert f"Memory of user {user} (0 items)" in output
    assert "relevance_count" in output
    assert "Nothing is stored for this user yet." in output


@pytest.mark.slow
def test_chat_answers_and_inspect_shows_what_was_learned(runner: CliRunner, database_url: str) -> None:
    user = uuid4()
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "OPENAI_API_KEY": ""}
    chat = runner.invoke(
        app,
        ["chat", "--user", str(user), "--session", "cli-chat"],
        input="Prefiero latón para los casquillos.\nexit\n",
        env=env,
    )
    assert chat.exit_code == 0, chat.output
    assert "model offline" in chat.output
    assert "arkcutt ›" in chat.output

    shown = runner.invoke(app, ["inspect", "--user", str(user)], env=env)
    assert shown.exit_code == 0, shown.output
    output = flat(shown.output)
    assert "Prefiere latón para los casquillos" in output
    assert "preferred_materials" in output


def test_chat_ends_cleanly_at_end_of_input(runner: CliRunner, database_url: str) -> None:
    result = runner.invoke(
        app, ["chat", "--user", str(uuid4())], input="", env={**WIDE, "MEMORY_DATABASE_URL": database_url}
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", ["inspect", "chat"])
def test_bad_user_id_is_a_clear_error(runner: CliRunner, command: str) -> None:
    result = runner.invoke(app, [command, "--user", "alice"], env=WIDE)

    assert result.exit_code != 0
    assert "--user must be a UUID" in result.output
    assert "'alice'" in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.slow
def test_unreachable_database_is_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    url = f"postgresql://postgres@/memory_plugin?host={tmp_path}&port=1&connect_timeout=1"
    result = runner.invoke(
        app,
        ["inspect", "--user", str(uuid4())],
        env={**WIDE, "MEMORY_DATABASE_URL": url, "MEMORY_CONNECT_TIMEOUT_SECONDS": "1"},
    )

    assert result.exit_code == 1
    assert "error:" in result.output
    assert "cannot connect to Postgres" in flat(result.output)
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_db_url_prints_the_configured_url_alone(runner: CliRunner, database_url: str) -> None:
    result = runner.invoke(app, ["db-url"], env={"MEMORY_DATABASE_URL": database_url})
    assert result.exit_code == 0, result.output
    assert result.stdout == database_url + "\n"


def test_migrate_and_erase_use_the_service_path(runner: CliRunner, database_url: str) -> None:
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "OPENAI_API_KEY": ""}
    migrated = runner.invoke(app, ["migrate"], env=env)
    assert migrated.exit_code == 0, migrated.output
    assert "(up to date)" in migrated.output

    user = uuid4()
    chat = runner.invoke(
        app, ["chat", "--user", str(user)], input="Prefiero latón para los casquillos.\nexit\n", env=env
    )
    assert chat.exit_code == 0, chat.output
    assert "Prefiere latón" in flat(runner.invoke(app, ["inspect", "--user", str(user)], env=env).output)

    refused = runner.invoke(app, ["erase", "--user", str(user)], input="n\n", env=env)
    assert refused.exit_code == 1
    assert "Prefiere latón" in flat(runner.invoke(app, ["inspect", "--user", str(user)], env=env).output)

    erased = runner.invoke(app, ["erase", "--user", str(user), "--yes"], env=env)
    assert erased.exit_code == 0, erased.output
    assert re.search(r"erased [1-9]\d* row\(s\)", erased.output)
    assert "Nothing is stored for this user yet." in flat(
        runner.invoke(app, ["inspect", "--user", str(user)], env=env).output
    )
