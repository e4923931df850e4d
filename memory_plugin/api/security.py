"""The API's security scheme as OpenAPI shows it: a bearer JWT (the Supabase user's access token).

Declared with FastAPI's `HTTPBearer` so the schema carries `components.securitySchemes` and every route that
needs a user lists it: `/docs` then has an Authorize button and "Try it out" sends the token. The check itself
stays in `auth.TokenVerifier` (`auto_error=False`: a missing token is its 401, with the API's error body).
"""

from __future__ import annotations

from fastapi.security import HTTPBearer

__all__ = ["BEARER"]

BEARER = HTTPBearer(
    scheme_name="SupabaseUserToken",
    bearerFormat="JWT",
    description=(
        "A Supabase user's access token (`session.access_token`), or for development one from"
        " `memory-plugin token --user UUID` (needs MEMORY_API_DEV_TOKENS=1 and MEMORY_JWT_SECRET)."
    ),
    auto_error=False,
)
