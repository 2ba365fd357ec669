"""The one way in: every face (REST, SSE, subscriptions, MCP) admits its caller here.

``Authenticate`` (ASGI middleware, outermost but for the connection rules)
reads the ``Authorization`` header of each request once, before any of its
body is read: one hash of the token, one lookup, one rate-limit check (in the
store, so that every API process spends from the same buckets). What
it found (``Auth``: the caller, or why there is none) goes into the request's
scope; routes, streams, MCP and the fair share read it from there
(``auth_of``). A request without a valid token that carries a body is
answered from its headers alone (401, or 429 past its address's rate) and its
body is never read: no route that takes a body works without a token, so no
bytes are held for anonymous requests beyond what the server reads ahead.

A request with a valid token spends from that token's bucket; a request
without one (none, malformed or unknown) spends from its client address's
bucket (every loopback address is one, ``messaging.web.addresses``), so a
flood of bad tokens never holds back a valid token from the same address, and
all bad tokens of one address wait together in the fair share.
A send (``SPENT_BY_ADMISSION``) owes its token's request instead (``Auth.owed``),
and its admission script spends it before anything else: the same one request
from the same bucket, one round trip fewer. Whatever answers the send before
its admission spends it first (``settle``), and an empty bucket answers 429 in
its place, as the gate would have. A bucket an API process found empty is
remembered until it has room again: meanwhile that token's sends spend at the
gate and are refused before their bodies are read, as every other request is.
A 401 names the Bearer scheme. A refusal is counted where answers leave
(``messaging.web.refusals``), like every other; a refused send never reaches
the send service, so it is no admission.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from messaging import ids
from messaging.errors import CourierError, unauthenticated
from messaging.service.caller import Caller, CallerKind, authenticate, bearer
from messaging.store.admission import RateCharge
from messaging.store.store import Store
from messaging.web.addresses import counted_as
from messaging.web.ratelimit import RateLimiter

AUTH_SCOPE_KEY = "courier.auth"
NO_TOKEN = "address:"  # the group of requests without a valid token, before their address
OPERATOR_GROUP = "operator"
# Answered before any authentication: they must answer while the store is slow.
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
# The requests whose admission script spends the token's request (method, path).
SPENT_BY_ADMISSION = frozenset({("POST", "/v1/messages")})



@dataclass(frozen=True)
class Auth:
    """What the headers of one request say of its caller."""

    caller: Caller | None
    # Why there is no caller; None with no caller: no token was sent (refused at use,
    # so that public routes spend nothing).
    refusal: CourierError | None
    address: str
    # Whose turns the request waits among in the fair share.
    group: str
    # The request the caller still owes to its token's rate bucket: left to the
    # admission script of a send (``SPENT_BY_ADMISSION``); None once spent.
    owed: RateCharge | None = None


class Gate:
    """Authentication and rate limits for one API process."""

    def __init__(self, store: Store, operator_token: str, rate_per_s: float) -> None:
        self.store = store
        self.operator_token = operator_token
        self.tokens = RateLimiter(store, rate_per_s, "token")
        self.addresses = RateLimiter(store, rate_per_s, "address without a valid token")

    async def authenticate(self, scope: Scope, *, defer: bool = False) -> Auth:
        """What the request's headers say of its caller (the token hashed once).

        ``defer``: a valid caller's request is not taken from its token's bucket
        here but owed (``Auth.owed``), for its admission to spend, or ``settle``;
        unless this process found the bucket empty lately: then it is taken
        now, so that a token past its rate is refused before its body is read.
        """
        address = client_address(scope)
        anonymous = NO_TOKEN + address
        token = bearer(authorization(scope))
        if token is None:
            return Auth(None, None, address, anonymous)
        token_hash = ids.token_hash(token)
        try:
            caller = await authenticate(self.store, self.operator_token, token, token_hash)
        except CourierError as exc:  # a store that failed too: answered from the scope
            return Auth(None, await self._limited(address) or exc, address, anonymous)
        if caller.kind is CallerKind.OPERATOR:
            group, bucket = OPERATOR_GROUP, self.store.token_bucket(None, token_hash)
        else:
            group = str(caller.project_id)
            bucket = self.store.token_bucket(group, token_hash)
        auth = Auth(caller, None, address, group, self.tokens.charge(bucket))
        if defer and not self.tokens.known_empty(bucket):
            return auth
        return await self.settle(auth)

    async def settle(self, auth: Auth) -> Auth:
        """``auth`` with the request it owes spent: as it was, or without its caller,
        refused, when the token's bucket is empty."""
        try:
            await self.tokens.spend(auth.owed)
        except CourierError as exc:
            return Auth(None, exc, auth.address, auth.group)
        return replace(auth, owed=None)

    async def caller(self, auth: Auth) -> Caller:
        """The request's caller.

        Raises:
            CourierError: UNAUTHENTICATED (with ``WWW-Authenticate``) or RATE_LIMITED.
        """
        if auth.caller is not None:
            return auth.caller
        if auth.refusal is not None:
            raise auth.refusal
        raise (await self._limited(auth.address)
               or unauthenticated("send Authorization: Bearer <token>"))

    async def _limited(self, address: str) -> CourierError | None:
        """The 429 of an address past its rate, else None (one request spent)."""
        try:
            await self.addresses.check(self.store.address_bucket(address))
        except CourierError as exc:
            return exc
        return None


class Authenticate:
    """ASGI middleware: each request's ``Auth`` into its scope, from its headers alone."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in HEALTH_PATHS:
            await self.app(scope, receive, send)
            return
        gate: Gate = scope["app"].state.services.gate
        defer = (scope["method"], scope["path"]) in SPENT_BY_ADMISSION
        auth = await gate.authenticate(scope, defer=defer)
        scope[AUTH_SCOPE_KEY] = auth
        if auth.caller is None and has_body(scope):
            try:
                await gate.caller(auth)
            except CourierError as exc:
                await refuse(exc, scope, receive, send)
                return
        await self.app(scope, receive, send)


def auth_of(scope: Scope) -> Auth:
    """The ``Auth`` that ``Authenticate`` put in the request's scope."""
    found: Auth = scope[AUTH_SCOPE_KEY]
    return found


async def settle_owed(scope: Scope) -> CourierError | None:
    """Spend the request the scope's caller still owes to its bucket (a send answered
    before its admission); the 429 that answers in place of anything else when the
    bucket is empty, else None."""
    auth: Auth | None = scope.get(AUTH_SCOPE_KEY)
    if auth is None or auth.owed is None:
        return None
    gate: Gate = scope["app"].state.services.gate
    scope[AUTH_SCOPE_KEY] = settled = await gate.settle(auth)
    return settled.refusal


async def refuse(exc: CourierError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer ``exc`` and close the connection: the rest of the body is not read."""
    response = JSONResponse(exc.body(), exc.status, headers={**exc.headers, "Connection": "close"})
    await response(scope, receive, send)


def has_body(scope: Scope) -> bool:
    """True when the request says a body follows (a length over 0, or chunks)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


def authorization(scope: Scope) -> str | None:
    """The Authorization header of an ASGI request, if any."""
    return next((value.decode("latin-1") for name, value in scope["headers"]
                 if name == b"authorization"), None)


def client_address(scope: Scope) -> str:
    """The client an ASGI request is counted as, by its address (every loopback address
    as one, ``messaging.web.addresses``; "" when the server gives none)."""
    client = scope.get("client")
    return counted_as(str(client[0])) if client else ""
