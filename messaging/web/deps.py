"""What every handler depends on: the process's services and the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from messaging.config import Settings
from messaging.runtime.publish import BatchPublisher
from messaging.service.caller import Caller
from messaging.service.events import Hub
from messaging.service.rendering import Renderer
from messaging.store.store import Store
from messaging.web.guard import Gate, auth_of


@dataclass
class Services:
    """What the handlers need, built once per process."""

    settings: Settings
    store: Store
    publisher: BatchPublisher
    operator_token: str
    gate: Gate
    hub: Hub
    renderer: Renderer


async def services(request: Request) -> Services:
    """The process's services (async: a plain def would run in a thread per request)."""
    found: Services = request.app.state.services
    return found


# Documents the scheme in the OpenAPI schema; the gate answers for a missing token.
BEARER = HTTPBearer(auto_error=False, description="A Courier token: operator, project or agent.")


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Caller:
    """The caller of this request, as the gate found it from the headers."""
    svc = await services(request)
    return await svc.gate.caller(auth_of(request.scope))


Svc = Annotated[Services, Depends(services)]
Who = Annotated[Caller, Depends(caller)]


class FastJSONResponse(JSONResponse):
    """JSON rendered by orjson: the same UTF-8 text, several times faster."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def ok(body: dict[str, Any], status: int = 200) -> JSONResponse:
    """A JSON answer."""
    return FastJSONResponse(body, status_code=status)
