"""URLs of the test database that cannot connect, one per cause (not a test module)."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["broken_url"]


def broken_url(database_url: str, where: str) -> str:
    """`database_url` with a closed port ("port"), a role that does not exist with a wrong password
    ("password"), or a host name that does not resolve ("host")."""
    params = {k: str(v) for k, v in conninfo_to_dict(database_url).items() if v is not None}
    params["connect_timeout"] = "2"
    if where == "port":
        params.update(host="127.0.0.1", port="1")
    elif where == "password":
        params.update(user="nobody", password="wrong")
    elif where == "host":
        params.update(host="nohost.invalid")
    else:
        raise ValueError(where)
    return make_conninfo(**params)
