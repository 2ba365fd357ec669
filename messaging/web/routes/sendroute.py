"""The send's route, ``POST /v1/messages``: the request agents make most.

It is one route of the app, behind the layers every request passes
(authentication, the body limit, the fair share, refusals counted).
FastAPI documents it from its endpoint (the body model, the answers) and
decodes what only its own handler can; a body declared ``application/json``
that orjson reads as an object the model accepts is served by the route
itself, without the framework's per-request machinery (a ``Request``,
dependencies, two exit stacks). Both go to the same service function, and
the answers are the same (tests compare them).

The request its token owes to its rate bucket is left to the admission
script (``guard.SPENT_BY_ADMISSION``: one round trip for the send); the send
service spends it before a refusal that comes first, and a body the
framework's handler decodes spends it before it goes there.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from messaging.models import SendIn
from messaging.service import sending
from messaging.web.bodylimit import replay
from messaging.web.deps import Services
from messaging.web.guard import auth_of, settle_owed

JSON_TYPE = b"application/json"


class SendRoute(APIRoute):
    """The send's route: a plain JSON send served here, any other by FastAPI's handler."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.framework = self.app
        self.app = self.serve

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit a plain send; hand any other to FastAPI's handler, its token's request
        spent first."""
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
                raise refusal
            await self.framework(scope, replay(body, receive), send)
            return
        try:
            sent = await sending.send(svc.store, svc.settings, svc.publisher, auth.caller,
                                      parsed, auth.owed)
        except sending.BucketEmpty as exc:
            raise svc.gate.tokens.emptied(exc.bucket, exc.wait_us) from None
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
