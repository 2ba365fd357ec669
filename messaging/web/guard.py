"""The one way in: every face (REST, SSE, subscriptions, MCP) admits its caller here.

A request with a valid token spends from that token's bucket; a request
without one (none, malformed or unknown) spends from its client address's
bucket, so a flood of bad tokens never holds back a valid token from the same
address. A 401 names the Bearer scheme. The project of each valid token is
told to the process's fair share (``messaging.web.fairshare``). Every refusal is counted here, by
code, whatever the face (``courier_gate_refusals``); a refused send never
reaches the send service, so it is no admission.
"""

from __future__ import annotations

from prometheus_client import Counter
from starlette.types import Scope

from messaging import ids
from messaging.errors import CourierError
from messaging.service.caller import Caller, authenticate, bearer
from messaging.store.facts import Lru
from messaging.store.store import Store
from messaging.web.ratelimit import RateLimiter

# Tokens whose project is remembered; the least recently used are forgotten first.
TOKENS_REMEMBERED = 50_000
NO_TOKEN = "address:"  # the group of requests without a token, before their address

REFUSALS = Counter("courier_gate_refusals", "Requests the gate refused on any face (REST, SSE, "
                   "subscriptions, MCP), by error code", ["code"])


class Projects:
    """Which project (or other caller) each token hash belongs to, as the gate found:
    the groups of the process's fair share."""

    def __init__(self, size: int = TOKENS_REMEMBERED) -> None:
        self._of: Lru[str, str] = Lru(size)

    def learn(self, token_hash: str, group: str) -> None:
        """Remember the group (a project id, or the token's own for an operator)."""
        self._of.put(token_hash, group)

    def group(self, scope: Scope) -> str:
        """Whose turns a request waits among: its token's project, once known; a token
        not seen yet, its own; without a token, its client address's."""
        token = bearer(authorization(scope))
        if token is None:
            return NO_TOKEN + client_address(scope)
        token_hash = ids.token_hash(token)
        return self._of.get(token_hash) or token_hash


class Gate:
    """Authentication and rate limits for one API process."""

    def __init__(self, store: Store, operator_token: str, rate_per_s: float,
                 projects: Projects | None = None) -> None:
        self.store = store
        self.operator_token = operator_token
        self.projects = projects or Projects()
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
        token_hash = ids.token_hash(token)
        self.projects.learn(token_hash, caller.project_id or token_hash)
        self.tokens.check(token_hash)
        return caller


def authorization(scope: Scope) -> str | None:
    """The Authorization header of an ASGI request, if any."""
    return next((value.decode("latin-1") for name, value in scope["headers"]
                 if name == b"authorization"), None)


def client_address(scope: Scope) -> str:
    """The client address of an ASGI request ("" when the server gives none)."""
    client = scope.get("client")
    return str(client[0]) if client else ""
