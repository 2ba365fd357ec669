"""Sends, served by the innermost of Courier's layers: ``POST /v1/messages``.

A send passes every layer every request passes, in order (refusals counted,
the caller found from the headers, the body read at its pace and within its
limit, a turn in the project's fair share); then ``ServeSends`` admits a body
declared ``application/json`` that orjson reads as an object the send's model
accepts, through the send service, and answers it (an error in Courier's
shape, as the app's handler answers it). Any other send goes on down, past
FastAPI's exception handling and router, to FastAPI's handler of the send's
route (``routes/messages.py``, which documents it), whose decoding and
validation answer it; the answers are the same either way (tests compare
them). The framework's per-request machinery (its exception layer, the router,
a ``Request``, dependencies, two exit stacks) took about a fifth of a send's
instructions in the API (callgrind, in process), so the common send passes it
by.

The request its token owes to its rate bucket is left to the admission
script (``guard.SPENT_BY_ADMISSION``: one round trip for the send); the send
service spends it before a refusal that comes first, and a send handed on is
charged before it goes (an empty bucket answers 429 in its place).
"""

from __future__ import annotations

import orjson
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from messaging.errors import CourierError
from messaging.models import SendIn
from messaging.service import sending
from messaging.web.bodylimit import replay
from messaging.web.deps import Services
from messaging.web.guard import auth_of, settle_owed
from messaging.web.refusals import error_response

JSON_TYPE = b"application/json"
SEND = ("POST", "/v1/messages")


class ServeSends:
    """ASGI layer, the innermost of Courier's: a plain JSON send admitted here, any
    other request handed on (to the router, and a send's body to FastAPI's handler
    of the send's route)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) != SEND:
            await self.app(scope, receive, send)
            return
        svc: Services = scope["app"].state.services
        auth = auth_of(scope)
        body = await _whole_body(receive)
        if body is None:  # the client went away; its request counts all the same
            await settle_owed(scope)
            return
        parsed = _parsed(body) if _declares_json(scope) else None
        if parsed is None or auth.caller is None:
            refusal = await settle_owed(scope)
            if refusal is not None:  # an empty bucket answers first, as at the gate
                await error_response(refusal)(scope, receive, send)
                return
            await self.app(scope, replay(body, receive), send)
            return
        try:
            sent = await sending.send(svc.store, svc.settings, svc.publisher, auth.caller,
                                      parsed, auth.owed)
        except sending.BucketEmpty as exc:
            await error_response(svc.gate.tokens.emptied(exc.bucket, exc.wait_us))(
                scope, receive, send)
            return
        except CourierError as exc:
            await error_response(exc)(scope, receive, send)
            return
        payload = orjson.dumps(sent.body)
        await send({"type": "http.response.start", "status": sent.status,
                    "headers": [(b"content-length", str(len(payload)).encode()),
                                (b"content-type", JSON_TYPE)]})
        await send({"type": "http.response.body", "body": payload})


async def _whole_body(receive: Receive) -> bytes | None:
    """The request's body (the body limit has read it already); None when the client
    went away."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _declares_json(scope: Scope) -> bool:
    """True for a request with one ``Content-Type``, ``application/json``."""
    types = [value for name, value in scope["headers"] if name == b"content-type"]
    return len(types) == 1 and types[0].split(b";")[0].strip().lower() == JSON_TYPE


def _parsed(body: bytes) -> SendIn | None:
    """The send a body holds, or None when FastAPI's handler should answer it."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        return SendIn.model_validate(data, from_attributes=True)
    except ValidationError:
        return None
