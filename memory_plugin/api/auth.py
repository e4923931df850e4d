"""Who is calling: the Supabase user JWT in `Authorization: Bearer`.

HS256 tokens are checked with the project's JWT secret (`MEMORY_JWT_SECRET`); asymmetric ones (RS256/ES256)
with the keys at `MEMORY_JWT_JWKS_URL`. The token must be unexpired, be addressed to this API (`aud`, which
Supabase sets to "authenticated"; `MEMORY_JWT_AUDIENCE`), carry `role = authenticated` and a `sub` that is a
UUID: that is the user every statement of the request runs as, under RLS.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from uuid import UUID

import jwt

from ..errors import MemoryPluginError

__all__ = ["AuthenticationError", "TokenVerifier"]

_ASYMMETRIC = ("RS256", "ES256", "EdDSA")


class AuthenticationError(MemoryPluginError):
    """The request carries no valid user token: send `Authorization: Bearer <Supabase access token>`."""


@dataclass
class TokenVerifier:
    """Verifies Supabase access tokens.

    Args:
        secret: The project's JWT secret (HS256).
        jwks_url: The project's JWKS endpoint (for asymmetric signing keys).
        audience: The `aud` every token must carry ("authenticated", what Supabase Auth issues): a token
            without it, or for another audience (another service's token signed with the same secret), is refused.
        leeway: Seconds of clock skew tolerated on `exp`/`iat`.
    """

    secret: str | None = None
    jwks_url: str | None = None
    audience: str = "authenticated"
    leeway: float = 10.0

    def __post_init__(self) -> None:
        if not self.secret and not self.jwks_url:
            raise AuthenticationError("no way to check tokens: set MEMORY_JWT_SECRET or MEMORY_JWT_JWKS_URL")
        if not self.audience:
            raise AuthenticationError("tokens need an audience to be checked against: set MEMORY_JWT_AUDIENCE")
        self._jwks = jwt.PyJWKClient(self.jwks_url, cache_keys=True) if self.jwks_url else None

    async def user_of(self, authorization: str | None) -> UUID:
        """The user id of a valid `Bearer` token; raises `AuthenticationError` for anything else."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthenticationError("missing bearer token")
        token = authorization[7:].strip()
        try:
            header = jwt.get_unverified_header(token)
            algorithm = header.get("alg")
            if algorithm == "HS256" and self.secret:
                key: object = self.secret
            elif algorithm in _ASYMMETRIC and self._jwks is not None:
                # PyJWKClient fetches over blocking HTTP (then caches): keep it off the event loop.
                key = (await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)).key
            else:
                raise AuthenticationError("token signed with an algorithm this server does not accept")
            claims = jwt.decode(
                token,
                key,  # type: ignore[arg-type]
                algorithms=[algorithm],
                audience=self.audience,
                leeway=self.leeway,
                options={"require": ["exp", "sub", "aud"], "verify_aud": True},
            )
        except AuthenticationError:
            raise
        except (jwt.PyJWTError, ValueError) as exc:
            raise AuthenticationError(f"invalid token: {exc}") from exc
        if claims.get("role") != "authenticated":
            raise AuthenticationError("token is not a signed-in user's (role must be 'authenticated')")
        try:
            return UUID(str(claims["sub"]))
        except ValueError as exc:
            raise AuthenticationError("token subject is not a user id") from exc
