"""Interactive API docs (Swagger UI at /docs, ReDoc at /redoc) served offline.

The pages load their scripts and styles from Courier itself, out of the
installed ``fastapi-offline`` package: no CDN, so they work with no network.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from messaging.errors import CourierError

ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
ASSETS_PATH = "/docs/assets"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
OPENAPI_URL = "/openapi.json"
TITLE = "Courier API"

router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    """Swagger UI over /openapi.json."""
    return get_swagger_ui_html(
        openapi_url=OPENAPI_URL, title=TITLE,
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
    )


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    """ReDoc over /openapi.json."""
    return get_redoc_html(
        openapi_url=OPENAPI_URL, title=TITLE,
        redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
        redoc_favicon_url=f"{ASSETS_PATH}/favicon.png", with_google_fonts=False,
    )


@router.get(ASSETS_PATH + "/{name}")
async def asset(name: str) -> FileResponse:
    """One file of the docs pages.

    Raises:
        CourierError: NOT_FOUND for anything but the files above.
    """
    if name not in ASSETS:
        raise CourierError("NOT_FOUND", "no such path or method")
    return FileResponse(ASSETS_DIR / name, media_type=ASSETS[name])
