"""`memory-plugin token --user UUID`: a development user token for the REST API (`api/devtoken.py`)."""

from __future__ import annotations

import sys
from typing import Annotated
from uuid import UUID

import typer

__all__ = ["register_token_command"]


def token(
    user: Annotated[UUID, typer.Option("--user", help="The user id (the token's `sub`).")],
    ttl: Annotated[int, typer.Option("--ttl", help="Seconds the token stays valid.")] = 3600,
) -> None:
    """Print a development user token for the REST API, signed with MEMORY_JWT_SECRET (refused unless
    MEMORY_API_DEV_TOKENS=1). Send it as `Authorization: Bearer <token>` or paste it in /docs' Authorize."""
    try:
        from ..api.devtoken import mint_dev_token
    except ImportError as exc:
        print(f"error: the token command needs the `api` extra ({exc.name} is missing)", file=sys.stderr)
        raise typer.Exit(1) from exc
    from ..errors import MemoryPluginError
    from ..settings import MemorySettings

    try:
        minted = mint_dev_token(MemorySettings(), user, ttl_seconds=ttl)
    except (MemoryPluginError, ValueError) as exc:  # ValueError: a malformed MEMORY_* variable
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from exc
    print(minted)


def register_token_command(app: typer.Typer) -> None:
    """Add `token` to the command line."""
    app.command("token")(token)
