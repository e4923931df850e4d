"""`token`: a development user token for the REST API (`api/devtoken.py`), refused unless
`MEMORY_API_DEV_TOKENS=1`."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import MemoryPluginError
from .common import app, fail, load_settings, parse_user

__all__ = ["token"]


@app.command("token")
def token(
    user: Annotated[str, typer.Option("--user", help="The user id (the token's `sub`), a UUID.")],
    ttl: Annotated[int, typer.Option("--ttl", help="Seconds the token stays valid.")] = 3600,
) -> None:
    """Print a development user token for the REST API, signed with MEMORY_JWT_SECRET (refused unless
    MEMORY_API_DEV_TOKENS=1). Send it as `Authorization: Bearer <token>` or paste it into /docs' Authorize."""
    try:
        from ..api.devtoken import mint_dev_token
    except ImportError as exc:
        raise fail(f"the token command needs the `api` extra ({exc.name} is missing)") from None
    try:
        minted = mint_dev_token(load_settings(None), parse_user(user), ttl_seconds=ttl)
    except MemoryPluginError as exc:
        raise fail(str(exc)) from None
    print(minted)  # bare, for `$(memory-plugin token …)`: no console markup or wrapping
