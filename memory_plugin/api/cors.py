"""Cross-origin requests from browser front ends: off unless `MEMORY_API_CORS_ORIGINS` lists origins.

Tokens travel in the `Authorization` header, never in cookies, so credentials mode stays off and `*` is safe
to allow when a deployment wants any origin.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

__all__ = ["add_cors", "parse_origins"]

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]  # PUT: /api/memory/pause
_HEADERS = ["Authorization", "Content-Type", "Idempotency-Key"]
_MAX_AGE_SECONDS = 600
"""How long a browser may cache a preflight answer (Chrome caps it at 7,200 s)."""


def parse_origins(value: str | None) -> list[str]:
    """`"https://a.example, https://b.example"` → the origins; empty or None → none."""
    return [o.strip().rstrip("/") for o in (value or "").split(",") if o.strip()]


def add_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """Answer preflights and add CORS headers for `origins` (nothing when there are none)."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=_METHODS,
        allow_headers=_HEADERS,
        expose_headers=["Content-Disposition", "WWW-Authenticate"],
        max_age=_MAX_AGE_SECONDS,
    )
