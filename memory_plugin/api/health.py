"""Health routes for load balancers and orchestrators: `/healthz` (the process answers) and `/readyz` (the
database answers too; 503 otherwise). Neither needs a token nor reveals anything about a user."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz", responses={200: {"description": "The process is up"}})
async def healthz() -> dict[str, str]:
    """The process is up and serving (liveness): no database call, so a slow database never restarts it."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={200: {"description": "Ready to serve"}, 503: {"description": "The database does not answer"}},
)
async def readyz(request: Request) -> JSONResponse:
    """The database answers (readiness): 503 while it does not, so traffic goes to another instance."""
    memory: Any = request.app.state.services.memory
    if memory is not None and not await memory.ping():
        body = {"error": {"code": "database_unavailable", "message": "the database does not answer"}}
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "ready"})
