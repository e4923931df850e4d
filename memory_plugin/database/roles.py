"""The least-privileged login role the plugin's own queries run as (`memory_plugin_app`).

On Supabase an administrator creates it once from `supabase/roles/memory_plugin_app.sql` and puts it in
`MEMORY_DATABASE_URL`. On the embedded default the plugin does the same itself: the server's superuser
migrates and keeps administrative work (`memory-plugin db-url`, `migrate`, `erase`), and the store connects
as `memory_plugin_app`, which can do nothing but become `authenticated` for one user's statement. A
statement that went wrong (or was injected) then meets row-level security and no escalation: `RESET ROLE`
gives `memory_plugin_app`, not `postgres`.

The embedded server trusts local connections (it listens on a Unix socket in its own directory, created by
initdb with `--auth=trust`), so the role has no password there: the point is what the plugin's queries may
do, not who may connect.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..errors import StoreError
from .migrations import sql_root
from .reach import connect_failure

__all__ = ["APP_ROLE", "WORKER_ROLE", "app_role_url", "ensure_app_role", "library_url", "worker_role_url"]

APP_ROLE = "memory_plugin_app"
"""The login role of supabase/roles/memory_plugin_app.sql."""


WORKER_ROLE = "memory_worker"
"""The role of the plugin's shared machinery (job queue, Postgres session store); memory_plugin_app holds it."""


def library_url(url: str, *, embedded: bool) -> str:
    """The URL every pool of the library connects with: on the embedded default the application role's (the
    server's superuser only migrates and administers); a configured URL as it is (its role is the operator's
    choice: `supabase/roles/memory_plugin_app.sql` in production)."""
    return app_role_url(url) if embedded else url


def worker_role_url(url: str) -> str:
    """`url` with `memory_worker` as the session's role from the start (`options=-c role=…`): for a pool whose
    every statement is service machinery (the Postgres session store)."""
    return make_conninfo(url, options=f"-c role={WORKER_ROLE}")


def app_role_url(admin_url: str) -> str:
    """`admin_url` with the application role as user (and no password)."""
    params = {k: v for k, v in conninfo_to_dict(admin_url).items() if v is not None and k != "password"}
    params["user"] = APP_ROLE
    return make_conninfo(**{k: str(v) for k, v in params.items()})


async def ensure_app_role(admin_url: str, *, connect_timeout: float = 5.0) -> str:
    """Create the application role from the shipped SQL if the server lacks it (without a password); returns
    the URL the store connects with. Needs the migrated schema's roles (`authenticated`)."""
    script = (sql_root() / "roles" / f"{APP_ROLE}.sql").read_text(encoding="utf-8").replace(":app_password", "null")
    try:
        async with await psycopg.AsyncConnection.connect(
            admin_url, autocommit=True, connect_timeout=max(1, round(connect_timeout))
        ) as conn:
            cursor = await conn.execute("select 1 from pg_roles where rolname = %s", (APP_ROLE,))
            if await cursor.fetchone() is None:
                try:
                    async with conn.transaction():
                        await conn.execute(script)
                except psycopg.errors.DuplicateObject:
                    pass  # another process created it meanwhile
    except psycopg.OperationalError as exc:
        raise connect_failure(exc, "as administrator ") from exc
    except psycopg.Error as exc:
        raise StoreError(f"cannot create the database role {APP_ROLE}: {exc}") from exc
    return app_role_url(admin_url)
