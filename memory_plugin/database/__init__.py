"""Operating the database: the embedded PostgreSQL server, migrations, roles, administrative tasks and the
call/error plumbing every Postgres backend shares. Nothing here knows a store (the connector that starts,
migrates and connects a manager's store is `runtime/connector.py`)."""

from .embedded import EmbeddedPostgres

__all__ = ["EmbeddedPostgres"]
