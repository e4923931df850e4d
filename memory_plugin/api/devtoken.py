"""Development tokens: a Supabase-shaped user JWT signed with the configured HS256 secret.

Only for trying the API locally (`memory-plugin token --user UUID`, then `Authorization: Bearer …` or the
Authorize button of `/docs`): whoever can mint them can act as any user, so minting is refused unless
`MEMORY_API_DEV_TOKENS=1`. In production tokens come from Supabase Auth.
"""

from __future__ import annotations

import time
from uuid import UUID

import jwt

from ..errors import MemoryPluginError
from ..settings import MemorySettings

__all__ = ["DEFAULT_TTL_SECONDS", "DevTokenRefusedError", "mint_dev_token"]

DEFAULT_TTL_SECONDS = 3600
"""As Supabase Auth's default access-token lifetime."""


class DevTokenRefusedError(MemoryPluginError):
    """Minting a development token is not allowed with these settings."""


def mint_dev_token(settings: MemorySettings, user: UUID, *, ttl_seconds: int = DEFAULT_TTL_SECONDS) -> str:
    """A token `TokenVerifier` accepts for `user`, valid `ttl_seconds`, with the claims Supabase Auth sets."""
    if not settings.api_dev_tokens:
        raise DevTokenRefusedError(
            "development tokens are off: set MEMORY_API_DEV_TOKENS=1 (never in production: they let anyone act as"
            " any user); real clients send their Supabase access token"
        )
    if settings.jwt_secret is None:
        raise DevTokenRefusedError("no secret to sign with: set MEMORY_JWT_SECRET (the one `serve` checks tokens with)")
    if ttl_seconds <= 0:
        raise DevTokenRefusedError("the token's lifetime must be positive: pass --ttl 3600, for example")
    now = int(time.time())
    claims = {
        "sub": str(user),
        "aud": settings.jwt_audience,
        "role": "authenticated",
        "aal": "aal1",
        "iss": "memory-plugin-dev",
        "iat": now,
        "exp": now + ttl_seconds,
        "is_anonymous": False,
    }
    return jwt.encode(claims, settings.jwt_secret.get_secret_value(), algorithm="HS256")
