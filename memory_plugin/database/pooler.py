"""Connection poolers in front of Postgres (Supabase's Supavisor, PgBouncer): what psycopg must not do through them.

In *transaction* mode (Supavisor on port 6543, PgBouncer's `pool_mode = transaction`) each transaction may run on
another server connection, so a statement that psycopg prepared on one (it prepares a query it has run 5 times:
`prepare_threshold`) is missing on the next: "prepared statement "_pg3_0" does not exist". Every connection and
pool the plugin opens therefore takes `connection_kwargs(url, mode)`, which turns preparing off in that mode. In
*session* mode (port 5432 of the pooler) and on a direct connection nothing changes.

The plugin's other habits already suit a transaction pooler: the identity prelude and a user's statements go in
one message (one transaction, `database.calls`), role and claims are transaction-local, locks are
`pg_advisory_xact_lock`. Migrations take a session-level advisory lock: run them over a direct or session-mode
URL (`MEMORY_ADMIN_DATABASE_URL`).
"""

from __future__ import annotations

from typing import Any, Literal

from psycopg.conninfo import conninfo_to_dict

__all__ = ["TRANSACTION_POOLER_PORT", "PoolerMode", "connection_kwargs", "transaction_pooled"]

PoolerMode = Literal["auto", "transaction", "session", "none"]
"""`MemorySettings.database_pooler`: `auto` (transaction mode when the URL's port is 6543), or said outright."""

TRANSACTION_POOLER_PORT = 6543
"""Supavisor's transaction-mode port on every Supabase project (session mode is 5432 on the same host)."""


def transaction_pooled(url: str, mode: PoolerMode = "auto") -> bool:
    """Whether connections to `url` go through a transaction-mode pooler: `mode`, or with `auto` the port."""
    if mode != "auto":
        return mode == "transaction"
    try:
        port = conninfo_to_dict(url).get("port")
    except Exception:  # not a connection string psycopg can read: connecting will say why
        return False
    # A multi-host URL lists one port per host ("6543,6543").
    return port is not None and all(p.strip() == str(TRANSACTION_POOLER_PORT) for p in str(port).split(","))


def connection_kwargs(url: str, mode: PoolerMode = "auto") -> dict[str, Any]:
    """psycopg connection arguments for `url`: `prepare_threshold=None` (never prepare) behind a transaction
    pooler, nothing otherwise."""
    return {"prepare_threshold": None} if transaction_pooled(url, mode) else {}
