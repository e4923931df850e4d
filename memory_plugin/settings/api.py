"""The REST API and chats (`memory-plugin serve`, `settings.api`; docs/chats.md)."""

from __future__ import annotations

from pydantic import Field, SecretStr

from .flat import Flat, SettingsGroup

__all__ = ["ApiNames", "ApiSettings"]


class ApiSettings(SettingsGroup):
    """The REST API (`settings.api`): user tokens, request bounds, CORS, development tokens."""

    jwt_secret: SecretStr | None = None
    """The Supabase project's JWT secret: the API accepts HS256 user tokens signed with it."""

    jwt_jwks_url: str | None = None
    """The project's JWKS endpoint (`https://<ref>.supabase.co/auth/v1/.well-known/jwks.json`), for user tokens
    signed with asymmetric keys."""

    jwt_audience: str = Field(default="authenticated", min_length=1)
    """The `aud` the API requires in user tokens: "authenticated" is what Supabase Auth issues; a token without
    it or for another audience is refused (401)."""

    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    """Largest request body the API accepts (413 beyond)."""

    rate_per_second: float = Field(default=10.0, ge=0)
    """Requests per second one user may make to the API once their burst is spent (429 with `Retry-After`
    beyond it; per server process); 0: no limit."""

    rate_burst: int = Field(default=100, ge=1)
    """Requests one user may make to the API at once before `api_rate_per_second` applies."""

    cors_origins: str = ""
    """Browser origins allowed to call the API, comma-separated (`https://app.example,http://localhost:5173`,
    or `*`); empty: no CORS headers, so browsers allow only same-origin pages."""

    dev_tokens: bool = False
    """Allow `memory-plugin token --user UUID` to mint user tokens with `jwt_secret`, and the dashboard's
    development sign-in (a user id, no password) (development only: anyone who can run it can act as any user)."""


class ApiNames:
    """The flat names (and `MEMORY_*` variables) of `ApiSettings`' fields."""

    jwt_secret = Flat[SecretStr | None]("api.jwt_secret")
    jwt_jwks_url = Flat[str | None]("api.jwt_jwks_url")
    jwt_audience = Flat[str]("api.jwt_audience")
    api_max_body_bytes = Flat[int]("api.max_body_bytes")
    api_rate_per_second = Flat[float]("api.rate_per_second")
    api_rate_burst = Flat[int]("api.rate_burst")
    api_cors_origins = Flat[str]("api.cors_origins")
    api_dev_tokens = Flat[bool]("api.dev_tokens")
