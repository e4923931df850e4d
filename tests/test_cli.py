"""The `memory-plugin` command line, run in-process with typer's CliRunner."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from uuid import uuid4

import pytest
from typer.testing import CliRunner

from memory_plugin.cli import app
from workflows.cli import DEMO_USER_ID, register

# The shop's commands, whatever directory first imported the command line (plugin discovery reads the current
# directory's pyproject.toml at import; tests/test_cli_plugins.py tests the discovery itself).
register(app)

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


def test_erase_says_when_the_redis_sessions_could_not_be_erased(runner: CliRunner, database_url: str) -> None:
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "MEMORY_SESSION_BACKEND": "redis", "MEMORY_REDIS_URL": None}
    erased = runner.invoke(app, ["erase", "--user", str(uuid4()), "--yes"], env=env)
    assert erased.exit_code == 1
    assert "the database rows are erased, but not the Redis sessions" in flat(erased.output)
    assert "MEMORY_REDIS_URL" in flat(erased.output)


# --- chat ends without tracebacks; output that is piped -------------------------------------------------------


def test_a_nul_byte_in_a_chat_message_is_refused_and_the_chat_goes_on(runner: CliRunner, database_url: str) -> None:
    user = uuid4()
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "OPENAI_API_KEY": ""}
    chat = runner.invoke(
        app,
        ["chat", "--user", str(user)],
        input="hola\x00mundo\nPrefiero latón para los casquillos.\nexit\n",
        env=env,
    )

    assert chat.exit_code == 0, chat.output
    assert "Traceback" not in chat.output
    _, _, rest = chat.output.partition("that message was not used")
    assert "NUL" in rest.splitlines()[0]
    assert "arkcutt ›" in rest  # the next message is answered
    assert "Prefiere latón para los casquillos" in flat(
        runner.invoke(app, ["inspect", "--user", str(user)], env=env).output
    )


def test_a_model_without_its_api_key_is_a_clear_error_before_the_chat(runner: CliRunner, database_url: str) -> None:
    env = {
        **WIDE,
        "MEMORY_DATABASE_URL": database_url,
        "MEMORY_AGENT_MODEL": "openai:gpt-4o-mini",
        "OPENAI_API_KEY": None,
    }
    result = runner.invoke(app, ["chat", "--user", str(uuid4())], input="hola\n", env=env)

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    output = flat(result.output)
    assert "MEMORY_AGENT_MODEL=openai:gpt-4o-mini cannot be used" in output
    assert "OPENAI_API_KEY" in output
    assert "tú ›" not in output  # refused before the conversation starts


@pytest.mark.slow
def test_ctrl_c_in_chat_stores_what_was_waiting_for_extraction(runner: CliRunner, database_url: str) -> None:
    # A real process and a real SIGINT at the prompt: one fact said, not yet extracted (the policy extracts every
    # few messages), must be extracted on Ctrl-C as on Ctrl-D.
    user = uuid4()
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "MEMORY_EMBEDDING_MODEL": "none", "OPENAI_API_KEY": ""}
    chat = subprocess.Popen(
        [sys.executable, "-c", "from memory_plugin.cli import app; app()", "chat", "--user", str(user)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    assert chat.stdin is not None
    assert chat.stdout is not None
    try:
        chat.stdin.write("Prefiero latón para los casquillos.\n")
        chat.stdin.flush()
        for line in chat.stdout:  # until the answer: the process is back at the prompt, reading
            if "arkcutt ›" in line:
                break
        assert "Prefiere latón" not in flat(runner.invoke(app, ["inspect", "--user", str(user)], env=env).output)

        chat.send_signal(signal.SIGINT)
        _, err = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()

    assert chat.returncode == 0, err
    assert "Traceback" not in err
    assert "Prefiere latón para los casquillos" in flat(
        runner.invoke(app, ["inspect", "--user", str(user)], env=env).output
    )


def test_piped_chat_reads_as_a_transcript(runner: CliRunner, database_url: str) -> None:
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "OPENAI_API_KEY": ""}
    chat = runner.invoke(
        app, ["chat", "--user", str(uuid4())], input="Prefiero latón para los casquillos.\nexit\n", env=env
    )

    assert chat.exit_code == 0, chat.output
    lines = chat.output.splitlines()
    # Each message after its prompt, each answer on its own line: not "tú › arkcutt › …".
    assert "tú › Prefiero latón para los casquillos." in lines
    assert any(line.startswith("arkcutt › ") for line in lines)
    assert "tú › exit" in lines


def test_piped_output_never_breaks_words(runner: CliRunner, database_url: str) -> None:
    user = uuid4()
    env = {"MEMORY_DATABASE_URL": database_url, "OPENAI_API_KEY": "", "COLUMNS": None}
    said = "Prefiero latón para los casquillos y aluminio 7075 para los soportes de los prototipos."
    assert runner.invoke(app, ["chat", "--user", str(user)], input=f"{said}\nexit\n", env=env).exit_code == 0

    shown = runner.invoke(app, ["inspect", "--user", str(user)], env=env)  # output to a pipe, COLUMNS unset

    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.output.splitlines() if "kind" in line)
    assert header.split() == ["kind", "category", "content", "confidence", "source", "relevance_count", "updated_at"]
    assert any("Prefiere latón para los casquillos" in line for line in shown.output.splitlines())


def test_help_lines_do_not_break_mid_sentence(runner: CliRunner) -> None:
    sentence = (
        "Which backend serves memory, whether the database answers, and the outage journal. Opening the memory "
        "replays what an earlier run journaled, if the database answers."
    )
    for args in (["--help"], ["status", "--help"]):
        shown = runner.invoke(app, args, env={"COLUMNS": "220"})
        assert shown.exit_code == 0
        assert any(sentence in line for line in shown.output.splitlines()), shown.output


def test_inspect_shows_how_a_sessions_next_turn_spends_the_token_budget(runner: CliRunner, database_url: str) -> None:
    user = uuid4()
    env = {**WIDE, "MEMORY_DATABASE_URL": database_url, "OPENAI_API_KEY": ""}
    chat = runner.invoke(
        app, ["chat", "--user", str(user), "--session", "cli-budget"], input="Prefiero latón.\nexit\n", env=env
    )
    assert chat.exit_code == 0, chat.output
    shown = runner.invoke(app, ["inspect", "--user", str(user), "--session", "cli-budget"], env=env)
    assert shown.exit_code == 0, shown.output
    output = flat(shown.output)
    assert "context budget of session cli-budget:" in output
    assert re.search(r"\d+/1000 tokens \(", output)
    slots = re.search(r"slots (\d+)", output)
    assert slots is not None
    assert int(slots.group(1)) > 0  # the preference said in the chat reaches the next turn through the slots


def test_journal_lists_set_aside_writes_and_readmits_the_reviewed_ones(runner: CliRunner, tmp_path: Path) -> None:
    from memory_plugin.outage import WriteJournal
    from memory_plugin.outage.journal import database_identity
    from memory_plugin.quality.rules import WriteRules
    from memory_plugin.rows import MemoryItem

    url = "postgresql://app@db.example:5432/shop"  # never connected to: the journal is a local file
    env = {**WIDE, "MEMORY_DATABASE_URL": url, "MEMORY_DATA_DIR": str(tmp_path)}
    journal = WriteJournal.for_database(tmp_path, database_identity(url))
    user = uuid4()
    old = [
        journal.append(
            user,
            [MemoryItem(kind="fact", category="preference", content=f"Prefiere latón {i}", content_hash=f"h{i}")],
            WriteRules(reinforcement_step=0.1),
        )
        for i in range(2)
    ]
    # A journal written before lines were signed: its entries are set aside at the first read.
    journal.path.write_text("".join(e.to_json() + "\n" for e in old), encoding="utf-8")
    assert journal.entries() == []

    listed = runner.invoke(app, ["journal"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "0 write(s) waiting" in flat(listed.output)
    assert "set aside for review (2)" in listed.output
    assert all(str(e.write_id) in listed.output for e in old)

    bad = runner.invoke(app, ["journal", "--readmit", "--write-id", "nope"], env=env)
    assert bad.exit_code != 0
    assert "UUID" in bad.output

    one = ["journal", "--readmit", "--write-id", str(old[1].write_id)]
    readmitted = runner.invoke(app, one, env=env)
    assert readmitted.exit_code == 0
    assert "readmitted 1 write(s)" in readmitted.output
    assert [e.write_id for e in WriteJournal.for_database(tmp_path, database_identity(url)).entries()] == [
        old[1].write_id
    ]
    after = runner.invoke(app, ["journal"], env=env)
    assert "1 write(s) waiting" in flat(after.output)
    assert "set aside for review (1)" in after.output

    both = runner.invoke(app, ["journal", "--readmit", "--discard"], env=env)
    assert both.exit_code != 0
    assert "exclude each other" in flat(both.output)
    discarded = runner.invoke(app, ["journal", "--discard", "--write-id", str(old[0].write_id)], env=env)
    assert discarded.exit_code == 0, discarded.output
    assert "discarded 1 set-aside write(s)" in discarded.output
    reread = WriteJournal.for_database(tmp_path, database_identity(url))
    assert (reread.rejected(), [e.write_id for e in reread.entries()]) == ([], [old[1].write_id])


def test_status_counts_every_set_aside_line_including_those_that_are_not_entries(
    runner: CliRunner, tmp_path: Path
) -> None:
    from memory_plugin.outage import WriteJournal
    from memory_plugin.outage.journal import database_identity

    url = "postgresql://app@127.0.0.1:1/shop"  # nothing listens: status reports the fallback and the journal
    env = {**WIDE, "MEMORY_DATABASE_URL": url, "MEMORY_DATA_DIR": str(tmp_path)}
    journal = WriteJournal.for_database(tmp_path, database_identity(url))
    journal.path.parent.mkdir(parents=True)
    journal.path.write_text("not a journal line at all\n", encoding="utf-8")
    assert journal.entries() == []  # the line moves to the rejected file
    assert journal.rejected_path.read_text(encoding="utf-8").strip() == "not a journal line at all"

    status = runner.invoke(app, ["status"], env=env)
    assert status.exit_code == 3, status.output  # degraded: the database does not answer
    assert re.search(r"set_aside_writes\s+1\b", status.output), status.output
    assert "--readmit" in flat(status.output)
    listed = runner.invoke(app, ["journal"], env=env)
    assert "1 set-aside line(s) are not journal entries" in flat(listed.output)
