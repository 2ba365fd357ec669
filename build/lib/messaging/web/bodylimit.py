"""The request body limit, counted on the bytes received, before anything parses them.

A body is read whole here (it is at most the limit) and handed on; the moment
more than the limit has arrived, chunked or not, the request is answered 413
``BODY_TOO_LARGE`` and the rest is never read. A ``Content-Length`` over the
limit is refused before a byte of the body is read.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from messaging.errors import CourierError
from messaging.web.deps import ok

# Room for the JSON around the largest message body allowed.
ENVELOPE_BYTES = 64 * 1024


class BodyLimit:
    """Refuses a request body over ``max_bytes`` as soon as that many bytes arrived."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        err = CourierError("BODY_TOO_LARGE", f"the request body is over {self.max_bytes} bytes",
                           {"max_bytes": self.max_bytes})
        response = ok(err.body(), err.status)
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read already, then waits on the client as before."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed
