"""`/docs`: Swagger UI served from this process, so it works offline and behind firewalls.

The assets come from the `swagger-ui-bundle` package (in the `api` extra); without it `/docs` falls back to
FastAPI's page, whose assets load from a CDN.
"""

from __future__ import annotations

import importlib.util

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_PATH", "add_docs"]

ASSETS_PATH = "/docs/assets"


def add_docs(app: FastAPI) -> None:
    """Serve `/docs` (and its assets under `ASSETS_PATH`) for `app.openapi_url`."""
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} - docs"
    if importlib.util.find_spec("swagger_ui_bundle") is None:
        urls: dict[str, str] = {}
    else:
        from swagger_ui_bundle import swagger_ui_path

        app.mount(ASSETS_PATH, StaticFiles(directory=swagger_ui_path), name="swagger-ui-assets")
        urls = {
            "swagger_js_url": f"{ASSETS_PATH}/swagger-ui-bundle.js",
            "swagger_css_url": f"{ASSETS_PATH}/swagger-ui.css",
            "swagger_favicon_url": f"{ASSETS_PATH}/favicon-32x32.png",
        }

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_ui_parameters={"persistAuthorization": True},
            **urls,  # type: ignore[arg-type]
        )
