"""The send, answered ahead of the framework's per-request machinery.

``POST /v1/messages`` is the request agents make most, and its common case
needs little of what serves every other route: ``DirectSends`` (the outermost
of Courier's ASGI layers) takes a send with a valid token and a body declared
``application/json``, and does for it what the layers beneath would, in
their order: the caller from the headers (the gate: one token hash, one
lookup), the body at its pace and within its limit
(``bodylimit.read_body``), a turn in the project's fair share (the same
``FairShare`` the other routes wait in), the body parsed by orjson and
validated by the model, the send service, and the answer, each error
answered and counted as the layers beneath answer and count it. The
request the token owes to its rate bucket is spent by the admission script
(one round trip for the send); on every other way out it is spent first, and
an empty bucket answers 429 in place of what would have followed, as the gate
beneath would have answered before anything else.

Everything else goes down the layers, as before: another path, method or
content type; a request without a valid caller (the gate's answer, found
once: what it found rides in the scope, so the gate beneath does not look
again); and a body that is not a JSON object the model accepts, handed on with
its bytes replayed (and its turn given back), so that FastAPI's own handler
answers it. The answer to a send is the same on either way (tests compare them).
"""

from __future__ import annotations

import orjson
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from messaging.errors import CourierError
from messaging.models import SendIn
from messaging.service import sending
from messaging.service.caller import Caller
from messaging.store.store import RateLimited
from messaging.web.bodylimit import read_body, replay
from messaging.web.deps import Services
from messaging.web.fairshare import FairShare
from messaging.web.guard import AUTH_SCOPE_KEY, Auth, refuse
from messaging.web.refusals import INTERNAL, answered_as, count, error_response

SEND_PATH = "/v1/messages"
JSON_TYPE = b"application/json"
FACE = "http"


class DirectSends:
    """ASGI middleware: the common case of ``POST /v1/messages``, answered here."""

    def __init__(self, app: ASGIApp, share: FairShare, max_bytes: int) -> None:
        self.app = app
        self.share = share
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _plain_send(scope):
            await self.app(scope, receive, send)
            return
        try:
            passed_on = await self._serve(scope, receive, send)
        except Exception:
            # As beneath: counted, then answered 500 by the server's last resort.
            count(INTERNAL, FACE)
            raise
        if passed_on is not None:
            await self.app(scope, passed_on, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """Serve the send; or return the ``receive`` to pass it on with (its body, if
        read, replayed)."""
        svc: Services = scope["app"].state.services
        auth = await svc.gate.authenticate(scope, defer=True)
        scope[AUTH_SCOPE_KEY] = auth
        if auth.caller is None:
            return receive
        try:
            body = await read_body(scope, receive, self.max_bytes)
        except CourierError as exc:
            refusal = (await svc.gate.settle(auth)).refusal or exc
            count(refusal.code, FACE)
            await refuse(refusal, scope, receive, send)  # the rest of the body is not read
            return None
        if body is None:  # the client went away; its request counts all the same
            settled = await svc.gate.settle(auth)
            if settled.refusal is not None:
                count(settled.refusal.code, FACE)
            return None
        async with self.share.turn(auth.group):
            parsed = _parsed(body)
            if parsed is not None:
                await _admit(svc, auth.caller, auth, parsed, scope, receive, send)
                return None
        scope[AUTH_SCOPE_KEY] = await svc.gate.settle(auth)
        return replay(body, receive)


def _plain_send(scope: Scope) -> bool:
    """True for a POST at the send path declaring a JSON body."""
    if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != SEND_PATH
            or scope.get("root_path")):
        return False
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


async def _admit(svc: Services, caller: Caller, auth: Auth, body: SendIn,
                 scope: Scope, receive: Receive, send: Send) -> None:
    """Send, and answer as the gate, the route and the app's exception handlers would."""
    owed = auth.owed
    try:
        sent = await sending.send(svc.store, svc.settings, svc.publisher, caller, body, owed)
    except RateLimited as exc:
        refusal = svc.gate.tokens.emptied(exc.bucket, exc.wait_us)
        count(refusal.code, FACE)
        await refuse(refusal, scope, receive, send)
        return
    except Exception as exc:
        # Refused before its admission spent the request it owes: spent now, and an
        # empty bucket answers in its place, as the gate would have before anything.
        uncounted = owed is not None and not owed.spent
        settled = await svc.gate.settle(auth)
        if settled.refusal is not None:
            count(settled.refusal.code, FACE)
            await refuse(settled.refusal, scope, receive, send)
            return
        err = answered_as(exc)
        if err is None:
            raise
        if uncounted and isinstance(exc, CourierError):
            sending.count_refusal(exc)
        count(err.code, FACE)
        await error_response(err)(scope, receive, send)
        return
    payload = orjson.dumps(sent.body)
    await send({"type": "http.response.start", "status": sent.status,
                "headers": [(b"content-length", str(len(payload)).encode()),
                            (b"content-type", JSON_TYPE)]})
    await send({"type": "http.response.body", "body": payload})
