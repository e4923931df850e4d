"""Operating the database: the embedded PostgreSQL server, migrations, administrative tasks, and the
connector that starts, connects and migrates for a manager."""

from .embedded import EmbeddedPostgres

__all__ = ["EmbeddedPostgres"]
