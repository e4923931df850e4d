"""The command line as a health check and a clear first report: `status`'s exit code, options on either side of
the subcommand, a connection failure named once by its cause."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import uuid4

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


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own: psycopg_pool's warnings reach stderr only there (pytest
    captures logging in-process)."""
    full = {**os.environ, **WIDE, "PYTHONPATH": str(Path(__file__).parents[1]), **env}
    return subprocess.run(
        [sys.executable, "-m", "memory_plugin.cli", *args], env=full, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("url", "cause"),
    [
        (CLOSED_PORT, "connection refused"),
        ("postgresql://postgres@nohost.invalid:5432/memory_plugin", "unknown host"),
        ("AUTH", "authentication failed"),
    ],
)
def test_a_connection_failure_names_its_cause_once_without_the_pools_warnings(
    url: str, cause: str, database_url: str, tmp_path: Path
) -> None:
    if url == "AUTH":  # the test database, as a role it does not have
        url = re.sub(r"^postgresql://[^@]*@", "postgresql://nobody:wrong@", database_url)
    env = {"MEMORY_DATABASE_URL": url, "MEMORY_DATA_DIR": str(tmp_path), "MEMORY_CONNECT_TIMEOUT_SECONDS": "2"}
    result = _cli("inspect", "--user", str(uuid4()), env=env)

    assert result.returncode == 1, result.stderr
    assert result.stderr.count("error:") == 1, result.stderr
    assert cause in result.stderr
    assert "error connecting in" not in result.stderr  # psycopg_pool's warning, once per attempt
    assert "pool initialization incomplete" not in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_demo_output_to_a_terminal_has_no_pydantic_ai_banner(tmp_path: Path) -> None:
    import pty

    # pydantic-ai shows its banner to a terminal only, never under pytest or CI: a pseudo-terminal, and
    # an environment without the variables that hide it, show what a user sees.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTEST_VERSION", "CI", "PYDANTIC_AI_NO_BANNER"}}
    env.update({**WIDE, "PYTHONPATH": str(Path(__file__).parents[1])})
    env.pop("MEMORY_DATABASE_URL", None)  # the demo's own embedded database, in tmp_path
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "memory_plugin.cli", "demo", "--data-dir", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=Path(__file__).parents[1],
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=180) == 0
    subprocess.run([sys.executable, "-m", "memory_plugin.cli", "stop", "--data-dir", str(tmp_path)], env=env)
    output = b"".join(chunks).decode("utf-8", "replace")

    assert "Sesión 2" in output  # the demo ran
    assert "pydantic-ai v" not in output
    assert "Logfire" not in output


async def test_a_server_refusing_tls_that_the_url_requires_is_named_as_tls() -> None:
    from psycopg_pool import AsyncConnectionPool

    from memory_plugin.database.reach import open_pool
    from memory_plugin.errors import StoreUnavailableError

    async def no_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(8)  # libpq's SSLRequest
        writer.write(b"N")  # a server without TLS answers N
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(no_tls, "127.0.0.1", 0)
    url = f"postgresql://app@127.0.0.1:{server.sockets[0].getsockname()[1]}/shop?sslmode=require"
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(url, open=False, kwargs={"connect_timeout": 1}, timeout=1)
    try:
        with pytest.raises(StoreUnavailableError, match="TLS failed"):
            await open_pool(pool, url, seconds=1, what="")
    finally:
        server.close()
