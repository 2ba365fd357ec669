"""The console at ``/ui``: three static files served by Courier, and rendered threads.

The page loads nothing from elsewhere and runs no inline script: its
Content-Security-Policy says so, and the browser enforces it. Everything it
shows comes from the public API with the project token as a bearer header.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from messaging.errors import not_found
from messaging.service import rendering
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["console"])

ASSETS = {"console.js": "text/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8"}
PAGE = "index.html"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Cache-Control": "no-cache"}


def _file(name: str, media_type: str) -> Response:
    data = resources.files("messaging.web").joinpath("ui", name).read_bytes()
    return Response(data, media_type=media_type, headers=HEADERS)


@router.get("/ui", include_in_schema=False)
async def console_page() -> Response:
    """The console's page."""
    return _file(PAGE, "text/html; charset=utf-8")


@router.get("/ui/{asset}", include_in_schema=False)
async def console_asset(asset: str) -> Response:
    """The console's script and stylesheet."""
    if asset not in ASSETS:
        raise not_found("file")
    return _file(asset, ASSETS[asset])


@router.get("/v1/threads/{thread_id}/rendered", response_model=answers.RenderedThread)
async def rendered_thread(thread_id: str, svc: Svc, who: Who) -> JSONResponse:
    """A thread as the caller may see it, each message with sanitized ``body_html``.

    A body that cannot be rendered within the budget is shown as escaped
    preformatted text (``<pre class="unrendered">``).
    """
    return ok(await rendering.rendered_thread(svc.store, who, thread_id, svc.renderer))
