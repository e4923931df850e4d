"""`serve`: the REST API on uvicorn, over the configured (or embedded) Postgres.

Opens one connection pool shared by the long-term store and the chat store, as the application role on the
embedded default (its superuser only migrates), and restarts the embedded server if it dies; every statement
runs as the request's user (role `authenticated` + the user's claims), so RLS applies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from uuid import UUID

from fastapi import FastAPI

from ..chats.postgres import PostgresChatStore
from ..chats.service import ChatService
from ..chats.summarizer import AgentSummarizer, ChatSummarizer
from ..consent import ConsentStore
from ..database import EmbeddedPostgres
from ..database.migrations import migrate
from ..database.pooler import connection_kwargs
from ..database.reach import connect
from ..database.roles import ensure_app_role
from ..embeddings.factory import default_embedder
from ..errors import MemoryPluginError
from ..export.service import PoolExporter
from ..settings import MemorySettings
from ..store.postgres import PostgresStore
from ..store.sealed import sealed_if_keys
from .app import ApiServices, create_app
from .auth import TokenVerifier
from .cors import parse_origins
from .devtoken import mint_dev_token

__all__ = ["build_app", "serve"]


async def _database(settings: MemorySettings) -> tuple[str, EmbeddedPostgres | None]:
    """The URL the API's pool connects with, and the embedded server when it is the embedded default: then
    its superuser migrates and the pool connects as the application role (`database/roles.py`), as the
    manager's does."""
    embedded: EmbeddedPostgres | None = None
    if settings.database_url is not None:
        url = settings.database_url.get_secret_value()
    else:
        embedded = EmbeddedPostgres.from_settings(settings, keep_running=True)
        url = await asyncio.to_thread(embedded.start)
    if settings.auto_migrate:
        admin = settings.admin_database_url.get_secret_value() if settings.admin_database_url else url
        pooled = connection_kwargs(admin, settings.database_pooler)
        async with await connect(admin, what="for the API's migrations ", autocommit=True, **pooled) as conn:
            await migrate(conn)
    if embedded is not None:
        url = await ensure_app_role(url, connect_timeout=settings.connect_timeout_seconds)
    return url, embedded


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
    url, embedded = await _database(settings)
    store = await PostgresStore.connect(
        url, min_size=settings.pool_min_size, max_size=settings.pool_max_size, pooler=settings.database_pooler
    )
    # The embedded server is restarted whenever it dies while the API runs, as the manager does.
    supervisor = (
        asyncio.get_running_loop().create_task(
            embedded.supervise(until=lambda: store.pool.closed), name="memory_plugin-embedded-supervisor"
        )
        if embedded is not None
        else None
    )
    try:
        chats = ChatService(PostgresChatStore(store.pool), embedder, summarizer)
        yield ApiServices(
            chats=chats,
            verifier=verifier,
            memory=sealed_if_keys(store, settings),
            exporter=PoolExporter(store.pool),
            consent=ConsentStore(pool=store.pool),
            pool=store.pool,
        )
    finally:
        await store.close()
        if supervisor is not None:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor


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
