"""The OpenAPI description and its pages (`/openapi.json`, `/docs`, `/redoc`), served behind
the authentication middleware like every other route (docs/security.md).

A browser opening `/docs?token=…` has no way to add a header to the page's own request for the
description, so the pages pass the `token` they were opened with on to it.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse


def add_docs(app: FastAPI) -> None:
    """Serve the description and its pages (build the app with `openapi_url=None`,
    `docs_url=None`, `redoc_url=None`)."""

    def spec_url(request: Request) -> str:
        token = request.query_params.get("token")
        return "/openapi.json" + (f"?{urlencode({'token': token})}" if token else "")

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=spec_url(request), title=f"{app.title} - docs")

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(openapi_url=spec_url(request), title=f"{app.title} - ReDoc")
