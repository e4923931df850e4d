"""Behind a transaction-mode pooler (Supabase's Supavisor on port 6543; here Debian's PgBouncer in front of the
session's embedded server): psycopg's prepared statements are turned off on every connection the plugin opens,
the store's writes and reads work, and the identity prelude covers each statement though consecutive
transactions land on other server connections, leaving nothing behind on them.

PgBouncer (`apt-get install pgbouncer`, done by `scripts/bootstrap --tests`) is skipped only outside CI."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memory_plugin import MemoryManager, MemorySettings
from memory_plugin.context.store import PostgresContextStore
from memory_plugin.database.calls import run_as_user
from memory_plugin.database.pooler import connection_kwargs, transaction_pooled
from memory_plugin.database.roles import APP_ROLE, ensure_app_role

PGBOUNCER = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if os.path.exists(p)), None)


def test_transaction_mode_comes_from_the_setting_or_port_6543() -> None:
    supavisor = "postgresql://memory_plugin_app.abcdefghijklmnop:pw@aws-0-eu-west-1.pooler.supabase.com:6543/postgres"
    session = supavisor.replace(":6543/", ":5432/")

    assert connection_kwargs(supavisor) == {"prepare_threshold": None}
    assert connection_kwargs(session) == {}
    assert transaction_pooled(session, "transaction")
    assert not transaction_pooled(supavisor, "session")
    assert not transaction_pooled(supavisor, "none")
    assert transaction_pooled("host=db.example port=6543 dbname=postgres")
    assert not transaction_pooled("postgresql:///postgres?host=/run/postgresql")  # no port: not a pooler
    assert MemorySettings(database_pooler="transaction").database_pooler == "transaction"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    word = next((w for w in out.split() if w[:1].isdigit()), "0")
    return tuple(int(p) for p in word.split(".") if p.isdigit())


@pytest.fixture(scope="module")
def pgbouncer(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A PgBouncer in transaction mode, two server connections, in front of the session's server; yields the
    admin URL (direct) and the application role's URL through the pooler."""
    if PGBOUNCER is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is missing in CI: scripts/bootstrap --tests installs it")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer, or scripts/bootstrap --tests)")
    asyncio.run(ensure_app_role(database_url))
    server = conninfo_to_dict(database_url)
    socket_dir = Path(str(server["host"]))
    directory = tmp_path_factory.mktemp("pgbouncer")
    port = _free_port()
    (directory / "users.txt").write_text(f'"{APP_ROLE}" ""\n"{server.get("user") or "postgres"}" ""\n')
    lines = [
        "[databases]",
        f"memory = host={socket_dir} port={server.get('port') or 5432} dbname={server['dbname']}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {directory / 'users.txt'}",
        "pool_mode = transaction",
        "default_pool_size = 2",
        "max_client_conn = 50",
        f"logfile = {directory / 'pgbouncer.log'}",
        f"pidfile = {directory / 'pgbouncer.pid'}",
    ]
    if _version(PGBOUNCER) >= (1, 21):
        lines.append("max_prepared_statements = 0")  # what Supavisor does: no protocol-level prepared statements
    owner = socket_dir.stat().st_uid
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root: as the server's own user, which can reach its socket.
        lines.append(f"user = {pwd.getpwuid(owner).pw_name}")
        os.chown(directory, owner, -1)
    (directory / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
    process = subprocess.Popen([PGBOUNCER, str(directory / "pgbouncer.ini")], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"pgbouncer did not start: {process.communicate()[1]!r}") from None
            time.sleep(0.05)
    pooled = make_conninfo(host="127.0.0.1", port=str(port), dbname="memory", user=APP_ROLE)
    try:
        yield {"admin": database_url, "pooled": pooled, "pooled_admin": make_conninfo(pooled, user="postgres")}
    finally:
        process.terminate()  # the process this fixture started, by its handle
        process.wait(timeout=15)


def _sequential_statements(url: str, **kwargs: object) -> None:
    """Three client connections take turns, each running the same parameterised query 7 times (psycopg
    prepares a query at its 5th run): PgBouncer hands each turn the most recently used server connection."""
    conns = [psycopg.connect(url, autocommit=True, **kwargs) for _ in range(3)]  # type: ignore[call-overload]
    try:
        for _ in range(7):
            for conn in conns:
                assert conn.execute("select %s::int + 1", (41,)).fetchone() == (42,)
    finally:
        for conn in conns:
            conn.close()


def test_psycopgs_prepared_statements_break_behind_a_transaction_pooler(pgbouncer: dict[str, str]) -> None:
    # What the setting is for: the second client's "_pg3_0" meets the first one's on the shared server connection.
    with pytest.raises(psycopg.Error, match="prepared statement"):
        _sequential_statements(pgbouncer["pooled"])

    _sequential_statements(pgbouncer["pooled"], **connection_kwargs(pgbouncer["pooled"], "transaction"))


async def test_the_store_writes_and_reads_through_a_transaction_pooler(
    pgbouncer: dict[str, str], tmp_path: Path
) -> None:
    settings = MemorySettings(
        database_url=pgbouncer["pooled"],
        admin_database_url=pgbouncer["admin"],  # migrations over a direct URL, as docs/supabase.md says
        database_pooler="transaction",
        embedding_model="none",
        data_dir=tmp_path,
        pool_max_size=4,
    )
    users = [uuid4(), uuid4()]
    async with MemoryManager.open(settings) as memory:

        async def work(user: int) -> None:
            for i in range(8):  # past psycopg's threshold of 5, on every statement the store sends
                await memory.remember(users[user], f"User {user} order {i} ships to warehouse {user}-{i}")
                hits = await memory.search(users[user], f"order {i} warehouse")
                assert hits, (user, i)
                assert all(h.memory.content.startswith(f"User {user} ") for h in hits)
                context = await memory.get_memory_context(f"session-{user}", users[user], query="warehouse")
                assert context.long_term_available
                assert context.long_term.facts
                assert all(f.content.startswith(f"User {user} ") for f in context.long_term.facts)

        # Context memory binds its parameters on the server (psycopg prepares them past 5 runs), on a pool of
        # its own: what breaks when preparing is not turned off.
        context = await PostgresContextStore.connect(pgbouncer["pooled"], max_size=4, pooler=settings.database_pooler)

        async def context_work(user: int) -> None:
            for _ in range(8):
                await context.read_slots(users[user])
                assert await context.summary_versions(users[user], "user") == []

        # Both users at once on several client connections over two server connections: consecutive
        # transactions of one client land on either server connection.
        try:
            await asyncio.gather(work(0), work(1), context_work(0), context_work(1))
        finally:
            await context.close()

        for user in (0, 1):
            records = await memory.search_text(users[user], "order", limit=50)
            assert len(records) == 8
            assert {r.content.split()[1] for r in records} == {str(user)}


async def test_the_identity_prelude_leaves_nothing_on_the_pooled_server_connection(pgbouncer: dict[str, str]) -> None:
    url = pgbouncer["pooled"]
    kwargs = connection_kwargs(url, "transaction")
    user = uuid4()
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True, **kwargs) as first,
        await psycopg.AsyncConnection.connect(url, autocommit=True, **kwargs) as second,
    ):
        [(rows, _)] = await run_as_user(first, user, ["select current_user, auth.uid() as uid"], {})
        assert rows == [("authenticated", user)]
        # The next client is given the server connection just released (PgBouncer reuses the last one): the role
        # and the claims were transaction-local, so it is the pool's role again, with no user.
        cursor = await second.execute("select current_user, coalesce(current_setting('request.jwt.claims', true), '')")
        assert await cursor.fetchone() == (APP_ROLE, "")
