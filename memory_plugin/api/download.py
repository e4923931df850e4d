"""A user's export as an HTTP download: what `GET /api/memory/export` and the dashboard's export link both send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

from fastapi.responses import StreamingResponse

from ..export.service import PoolExporter

__all__ = ["export_download"]


async def export_download(exporter: PoolExporter, user: UUID) -> StreamingResponse:
    """`user`'s export document, streamed as a JSON attachment. The first chunk is read before the response
    starts, so a failure to begin (the database down) is still an error response, not a truncated file."""
    chunks = exporter.chunks(user)
    first = await anext(chunks)

    async def body() -> AsyncIterator[bytes]:
        yield first.encode()
        async for chunk in chunks:
            yield chunk.encode()

    disposition = f'attachment; filename="memory-export-{user}.json"'
    return StreamingResponse(body(), media_type="application/json", headers={"Content-Disposition": disposition})
