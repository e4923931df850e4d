"""`serve`: the REST API on uvicorn, over the configured (or embedded) Postgres.

The database comes from the composition root through one `MemoryManager` (`runtime/assembly`: started,
migrated, the one pool as the application role, the embedded server restarted if it dies and left running after
the process): the memory turn (`POST /api/memory/context`, `POST /api/memory/turns`) runs on the manager, which
also runs the queued extractions of the turns it records, and the long-term store, the chat store, the export and
the memory switch share the manager's pool. Every statement runs as the request's user (role `authenticated` +
the user's claims), so RLS applies. The database must answer at start (`require_pg_memory`): the API has no
outage mode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from uuid import UUID

from fastapi import FastAPI

from ..chats.postgres import PostgresChatStore
from ..chats.service import ChatService
from ..chats.summarizer import AgentSummarizer, ChatSummarizer
from ..embeddings.factory import default_embedder
from ..errors import MemoryPluginError, StoreUnavailableError
from ..export.service import PoolExporter
from ..manager import MemoryManager
from ..settings import MemorySettings
from ..store.sealed import sealed_if_keys
from .app import ApiServices, create_app
from .auth import TokenVerifier
from .cors import parse_origins
from .devtoken import mint_dev_token

__all__ = ["build_app", "serve"]


@asynccontextmanager
async def open_services(settings: MemorySettings) -> AsyncIterator[ApiServices]:
    """The API's services on the settings' database; closed on exit."""
    verifier = TokenVerifier(
        secret=settings.jwt_secret.get_secret_value() if settings.jwt_secret else None,
        jwks_url=settings.jwt_jwks_url,
        audience=settings.jwt_audience,
    )
    embedder = default_embedder(settings)
    if embedder is None:
        raise MemoryPluginError(
            "chat search needs an embedding model: set MEMORY_EMBEDDING_MODEL (e.g. 'local' with the `local` extra)"
        )
    summarizer: ChatSummarizer | None = (
        AgentSummarizer(settings.chat_summary_model) if settings.chat_summary_model else None
    )
    served = settings.replace(require_pg_memory=True)  # a database down at start is an error, with its cause
    async with MemoryManager.open(served, embedder=embedder, keep_running=True) as manager:
        store = manager.database_store
        if store is None:  # only with a store passed in, which serve never does
            raise StoreUnavailableError("the REST API needs its Postgres database: none is connected")
        yield ApiServices(
            chats=ChatService(PostgresChatStore(store.pool), embedder, summarizer),
            verifier=verifier,
            memory=sealed_if_keys(store, settings),
            exporter=PoolExporter(store.pool),
            consent=manager.memory_switch,
            pool=store.pool,
            manager=manager,
        )


def _add_dashboard(app: FastAPI, services: ApiServices, settings: MemorySettings) -> None:
    """The user's dashboard at /dashboard; its development sign-in only with MEMORY_API_DEV_TOKENS=1 and a secret."""
    from ..dashboard import add_dashboard

    if services.pool is None:
        return
    dev = settings.api_dev_tokens and settings.jwt_secret is not None
    minter: Callable[[UUID], str] | None = (lambda user: mint_dev_token(settings, user)) if dev else None
    add_dashboard(app, services, services.pool, dev_login=minter)


def build_app(settings: MemorySettings) -> FastAPI:
    """The app, opening its services when uvicorn starts it and closing them when it stops."""
    holder: dict[str, FastAPI] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with open_services(settings) as services:
            inner = create_app(
                services,
                max_body_bytes=settings.api_max_body_bytes,
                cors_origins=parse_origins(settings.api_cors_origins),
                rate_per_second=settings.api_rate_per_second,
                rate_burst=settings.api_rate_burst,
            )
            _add_dashboard(inner, services, settings)
            holder["app"] = inner
            outer.mount("/", inner)
            yield

    outer = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    return outer


def serve(settings: MemorySettings, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the API until interrupted."""
    import uvicorn

    uvicorn.run(build_app(settings), host=host, port=port, log_level="info")
