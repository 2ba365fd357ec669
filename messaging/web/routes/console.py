"""The console at ``/ui``: three static files served by Courier, and rendered threads.

The page loads nothing from elsewhere and runs no inline script: its
Content-Security-Policy says so, and the browser enforces it. Everything it
shows comes from the public API with the project token as a bearer header.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from messaging.errors import not_found
from messaging.models import ThreadQuery
from messaging.service import rendering
from messaging.web import answers
from messaging.web.deps import FastJSONResponse, Svc, Who

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


@router.get("/v1/threads/{thread_id}/rendered", response_model=answers.RenderedThread,
            responses={304: {"description": "Not modified: the thread is as the `ETag` "
                                             "sent in `If-None-Match` stands for"}})
async def rendered_thread(thread_id: str, q: Annotated[ThreadQuery, Query()], request: Request,
                          svc: Svc, who: Who) -> Response:
    """A page of a thread as the caller may see it, each message's body as sanitized ``body_html``.

    Paged as ``GET /v1/threads/{thread_id}``; ``body_html`` stands in place of
    ``body_md``. A body that cannot be rendered within the budget is shown as
    escaped preformatted text (``<pre class="unrendered">``). The answer's ``ETag``
    changes whenever the answer does: sent back in ``If-None-Match``, an
    unchanged page answers 304 with no body.
    """
    thread, tag = await rendering.rendered_thread(svc.store, who, thread_id, q, svc.renderer)
    etag = f'"{tag}"'
    headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
    named = if_none_match(request.headers.get("if-none-match", ""))
    if etag in named or "*" in named:
        return Response(status_code=304, headers=headers)
    return FastJSONResponse(thread, headers=headers)


def if_none_match(header: str) -> set[str]:
    """The entity tags an ``If-None-Match`` header names (weak ones compared as strong)."""
    return {t.strip().removeprefix("W/") for t in header.split(",") if t.strip()}
