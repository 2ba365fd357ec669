"""The request body limit and pace, counted on the bytes received, before anything parses them.

The limit (``request_cap``) is that of the raw request: it holds the largest
``body_md`` allowed (whose own limit the send service counts on its text) in
its worst JSON form, every byte escaped, and the fields around it.

A body is read whole here (it is at most the limit) and handed on; the moment
more than the limit has arrived, chunked or not, the request is answered 413
``BODY_TOO_LARGE`` and the rest is never read. A ``Content-Length`` over the
limit is refused before a byte of the body is read.

A body must keep coming: when nothing of it arrives for ``BODY_STALL_S``, or
the whole of it takes longer than ``BODY_TOTAL_S`` (1 MiB in a minute is about
17 KiB/s, slower than any real client), the request is answered 408
``REQUEST_TIMEOUT`` and the connection closed. This runs before the fair share
(``messaging.web.fairshare``): a body still on its way holds no turn.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from messaging.errors import CourierError
from messaging.web.guard import refuse, settle_owed

# Room for the JSON around the largest message body allowed.
ENVELOPE_BYTES = 64 * 1024
# The most bytes JSON may take to write one byte of UTF-8 text: ``\u0061`` for ``a``,
# ``\u0001`` for a control character (which JSON must escape).
JSON_ESCAPE_MAX = 6
# Longest wait for the next part of a body, and for all of it.
BODY_STALL_S = 10.0
BODY_TOTAL_S = 60.0


class BodyLimit:
    """Refuses a request body over ``max_bytes`` as soon as that many bytes arrived."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(scope, receive, self.max_bytes)
        except CourierError as exc:
            await refuse(await settle_owed(scope) or exc, scope, receive, send)
            return
        if body is None:  # the client went away; its request counts all the same
            await settle_owed(scope)
            return
        await self.app(scope, replay(body, receive), send)


async def read_body(scope: Scope, receive: Receive, max_bytes: int) -> bytes | None:
    """A request's whole body, read at its pace; None when the client went away first.

    Raises:
        CourierError: BODY_TOO_LARGE (declared or received over ``max_bytes``) or
            REQUEST_TIMEOUT (the body stalled or took too long); the rest is not read.
    """
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + BODY_TOTAL_S
    while True:
        wait_s = min(BODY_STALL_S, max(0.0, deadline - time.monotonic()))
        try:
            async with asyncio.timeout(wait_s):
                message = await receive()
        except TimeoutError:
            raise CourierError(
                "REQUEST_TIMEOUT", f"the request body stalled for {BODY_STALL_S:g} s or took "
                f"over {BODY_TOTAL_S:g} s", {"stall_s": BODY_STALL_S, "total_s": BODY_TOTAL_S},
            ) from None
        if message["type"] != "http.request":  # the client went away
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise too_large(max_bytes)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def request_cap(max_body_bytes: int) -> int:
    """The limit of a request's raw bytes for a ``body_md`` limit of ``max_body_bytes``
    (counted on its text, as UTF-8): room for that text escaped at worst, and the rest."""
    return JSON_ESCAPE_MAX * max_body_bytes + ENVELOPE_BYTES


def too_large(max_bytes: int) -> CourierError:
    """The refusal of a body over ``max_bytes``."""
    return CourierError("BODY_TOO_LARGE", f"the request body is over {max_bytes} bytes",
                        {"max_bytes": max_bytes})


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read already, then waits on the client as before."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed
