"""Refusals: every error answer, counted by code and face where it leaves the API.

An error answer is counted once, whoever made it (a route's ``CourierError``, a
validation error, the gate, the body limit, an unexpected failure): over HTTP
by ``CountRefusals``, which sees every answer leave, and over MCP, whose tool
errors travel in 200 answers, by the MCP server where it makes a tool error
(``messaging.web.mcp_tools``). Both count here, in ``courier_refusals_total``.
"""

from __future__ import annotations

import json

from prometheus_client import Counter
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from messaging.errors import CourierError

REFUSALS = Counter("courier_refusals", "Error answers on every face (http, sse, mcp), by error "
                   "code; INTERNAL is a failure nobody expected", ["code", "face"])
# Error answers are small; a longer body is no Courier error object.
ERROR_BODY_MAX_BYTES = 64 * 1024
INTERNAL = "INTERNAL"


def count(code: str, face: str) -> None:
    """Count one refusal."""
    REFUSALS.labels(code=code, face=face).inc()


def answered_as(exc: Exception) -> CourierError | None:
    """The error an exception is answered as: a ``CourierError`` itself (the store's
    failures are Courier's from its boundary on, ``messaging.store.failures``); None
    for a failure nobody expected (a 500)."""
    return exc if isinstance(exc, CourierError) else None


def error_response(exc: CourierError) -> JSONResponse:
    """The HTTP answer of an error, in Courier's shape."""
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def error_code(body: bytes) -> str | None:
    """The code of an answer in Courier's error shape, or None for any other body."""
    try:
        answer = json.loads(body)
        code = answer["error"]["code"]
    except (ValueError, TypeError, KeyError):
        return None
    return code if isinstance(code, str) else None


class CountRefusals:
    """Counts every HTTP answer with a status of 400 or more that carries an error code."""

    def __init__(self, app: ASGIApp, faces: dict[str, str]) -> None:
        self.app = app
        self.faces = faces  # path -> face; every other path is "http"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        face = self.faces.get(scope["path"], "http")
        refused = False
        body = bytearray()

        async def watch(message: Message) -> None:
            nonlocal refused
            if message["type"] == "http.response.start":
                refused = message["status"] >= 400
            elif refused and message["type"] == "http.response.body":
                if len(body) <= ERROR_BODY_MAX_BYTES:
                    body.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    code = error_code(bytes(body))
                    if code is not None:
                        count(code, face)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            count(INTERNAL, face)  # answered 500 by the server's last resort
            raise
