"""`ApiError`: an error the API answers with its error body `{"error": {"code", "message"}}` and a status."""

from __future__ import annotations

__all__ = ["ApiError"]


class ApiError(Exception):
    """An error answered with the API's error body (and `headers`, e.g. `Retry-After`)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
