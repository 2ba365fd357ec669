"""The live routes: the event stream, idle subscriptions, and the MCP endpoint.

``install(app)`` adds them to the API app (``messaging.web.app``); the handlers
are as thin as the API's own, over ``events``, ``subscriptions`` and ``mcp``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Header, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.routing import Route

from messaging.config import get_settings
from messaging.errors import not_found
from messaging.models import SubscriptionIn
from messaging.service import events, subscriptions
from messaging.service.caller import Caller, authenticate
from messaging.web.mcp import Services, mcp_app

MCP_PATH = "/mcp"

router = APIRouter()


async def _services_and_caller(request: Request) -> tuple[Services, Caller]:
    svc: Services = request.app.state.services
    caller = await authenticate(svc.store, svc.operator_token, request.headers.get("authorization"))
    return svc, caller


@router.get("/v1/agents/me/events", response_model=None)
async def agent_events(
    request: Request,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventSourceResponse:
    """The caller's live events (Server-Sent Events), resumable with ``Last-Event-ID``."""
    svc, who = await _services_and_caller(request)
    given = last_event_id or request.query_params.get("last_event_id")
    start = await events.start(svc.store, who, given)
    return EventSourceResponse(events.stream(svc.store, who, start),
                               ping=events.HEARTBEAT_S,
                               headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.post("/v1/subscriptions", status_code=201)
async def create_subscription(body: SubscriptionIn, request: Request) -> JSONResponse:
    """One notice when the target next goes idle or exits, or when the time runs out."""
    svc, who = await _services_and_caller(request)
    made = await subscriptions.subscribe(svc.store, svc.settings, svc.publisher, who, body)
    return JSONResponse(made.body, status_code=made.status)


@router.get("/v1/subscriptions/{subscription_id}")
async def get_subscription(subscription_id: str, request: Request) -> JSONResponse:
    """One subscription, for its subscriber."""
    svc, who = await _services_and_caller(request)
    project_id, agent_id = who.require_agent()
    found = await svc.store.live.get_subscription(project_id, subscription_id)
    if found is None or found["subscriber_id"] != agent_id:
        raise not_found("subscription")
    return JSONResponse(subscriptions.view(found))


def mount_mcp(app: FastAPI) -> None:
    """Serve MCP at ``/mcp`` and run its session manager within the app's lifespan."""
    endpoint, manager = mcp_app(get_settings())
    app.router.routes.append(Route(MCP_PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state, manager.run():
            yield state

    app.router.lifespan_context = lifespan


def install(app: FastAPI) -> None:
    """Add the live routes and the MCP endpoint to the API app."""
    app.include_router(router)
    mount_mcp(app)
