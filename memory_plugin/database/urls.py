"""Database URLs as they may be shown (in logs, status pages and `describe()`) and what identifies the database
one names (`database_identity`: the outage journal's key)."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["database_identity", "masked_url"]


def database_identity(url: str) -> str:
    """What identifies a Postgres database for the journal: host (or socket directory), port and database
    name from a connection URL or conninfo string; the user and password are left out (the same database
    reached as another role is the same database)."""
    params = conninfo_to_dict(url)
    host = str(params.get("host") or params.get("hostaddr") or "")
    port = str(params.get("port") or "5432")
    dbname = str(params.get("dbname") or params.get("user") or "")
    return f"postgresql://{host}:{port}/{dbname}"


def masked_url(url: str) -> str:
    """`url` with its password replaced by `***` (a URL or a `key=value` connection string)."""
    if "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, at, host = rest.rpartition("@")
        if not at:
            return _mask_query(url)
        user, _, password = credentials.partition(":")
        if not password:  # no password to hide ("postgres:@…", the embedded server's socket URL)
            return _mask_query(url)
        return _mask_query(f"{scheme}://{user}:***@{host}")
    try:
        params = conninfo_to_dict(url)
    except Exception:  # not a connection string: show nothing of it
        return "***"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo(**{k: str(v) for k, v in params.items()})


def _mask_query(url: str) -> str:
    """A `password=` query parameter masked too."""
    head, sep, query = url.partition("?")
    if not sep:
        return url
    parts = [p if not p.lower().startswith("password=") else "password=***" for p in query.split("&")]
    return head + "?" + "&".join(parts)
