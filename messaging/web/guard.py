"""The one way in: every face (REST, SSE, subscriptions, MCP) admits its caller here.

A request with a valid token spends from that token's bucket; a request
without one (none, malformed or unknown) spends from its client address's
bucket, so a flood of bad tokens never holds back a valid token from the same
address. A 401 names the Bearer scheme. Every refusal is counted here, by
code, whatever the face (``courier_gate_refusals``); a refused send never
reaches the send service, so it is no admission.
"""

from __future__ import annotations

from prometheus_client import Counter
from starlette.types import Scope

from messaging import ids
from messaging.errors import CourierError
from messaging.service.caller import Caller, authenticate
from messaging.store.store import Store
from messaging.web.ratelimit import RateLimiter

REFUSALS = Counter("courier_gate_refusals", "Requests the gate refused on any face (REST, SSE, "
                   "subscriptions, MCP), by error code", ["code"])


class Gate:
    """Authentication and rate limits for one API process."""

    def __init__(self, store: Store, operator_token: str, rate_per_s: float) -> None:
        self.store = store
        self.operator_token = operator_token
        self.tokens = RateLimiter(rate_per_s, "token")
        self.addresses = RateLimiter(rate_per_s, "address without a valid token")

    async def admit(self, token: str | None, address: str) -> Caller:
        """The caller of a request that carried ``token`` (or none) from ``address``.

        Raises:
            CourierError: UNAUTHENTICATED (with ``WWW-Authenticate``) or RATE_LIMITED.
        """
        try:
            return await self._admit(token, address)
        except CourierError as exc:
            REFUSALS.labels(code=exc.code).inc()
            raise

    async def _admit(self, token: str | None, address: str) -> Caller:
        try:
            caller = await authenticate(self.store, self.operator_token, token)
        except CourierError as exc:
            if exc.code == "UNAUTHENTICATED":
                self.addresses.check(address)
            raise
        assert token is not None
        self.tokens.check(ids.token_hash(token))
        return caller


def client_address(scope: Scope) -> str:
    """The client address of an ASGI request ("" when the server gives none)."""
    client = scope.get("client")
    return str(client[0]) if client else ""
