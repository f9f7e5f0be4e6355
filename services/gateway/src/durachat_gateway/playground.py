"""The web playground at `/playground` (docs/client.md#the-web-playground): a React app on the
real client stack (`useAgent`, `useAgentChat`), built from `playground/` with Vite into
`playground_dist/` beside this module, which is committed, so serving it needs no Node.js."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, PlainTextResponse, Response
from starlette.staticfiles import StaticFiles

DIST: Final = Path(__file__).resolve().parent / "playground_dist"
"""The built playground (`cd playground && npm run build`)."""


def mount_playground(app: FastAPI, dist: Path = DIST) -> None:
    """Serve the playground's page at `/playground` and its assets below it."""
    router = APIRouter(include_in_schema=False)
    index = dist / "index.html"

    @router.get("/playground")
    @router.get("/playground/")
    async def page() -> Response:
        if not index.is_file():
            return PlainTextResponse("The playground is not built (see docs/client.md).", 404)
        # The page names its assets by content hash: only the page itself must not be cached.
        return FileResponse(index, headers={"cache-control": "no-cache"})

    app.include_router(router)
    assets = dist / "assets"
    if assets.is_dir():
        app.mount("/playground/assets", StaticFiles(directory=assets), name="playground-assets")
