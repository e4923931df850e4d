"""The dashboard's sign-in cookie and its CSRF tokens.

The cookie holds the user's bearer token (HttpOnly, SameSite=Strict, path /dashboard), checked by the API's
`TokenVerifier` on every request, so the dashboard trusts nothing the API would not. Every form carries a token
derived from that bearer token with a per-process key (HMAC-SHA256): a page of another site can neither read it
nor, with SameSite=Strict, send the cookie. The sign-in forms use a double-submit cookie instead.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from fastapi import Request, Response

__all__ = ["LOGIN_COOKIE", "SESSION_COOKIE", "CsrfKeys"]

SESSION_COOKIE = "memory_dashboard"
LOGIN_COOKIE = "memory_dashboard_login"
PATH = "/dashboard"


class CsrfKeys:
    """Per-process CSRF keys (a restart only asks open forms to be sent again)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def for_session(self, bearer: str) -> str:
        """The CSRF token of the session holding `bearer`."""
        return hmac.new(self._key, bearer.encode(), hashlib.sha256).hexdigest()

    def check(self, bearer: str, sent: str | None) -> bool:
        """Whether a form's token belongs to this session."""
        return sent is not None and hmac.compare_digest(self.for_session(bearer), sent)


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    """An HttpOnly, SameSite=Strict cookie for the dashboard's path (Secure over https)."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response, name: str) -> None:
    """Remove a dashboard cookie."""
    response.delete_cookie(name, path=PATH)
