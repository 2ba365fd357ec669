"""The live routes: the event stream and idle subscriptions."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from messaging.errors import not_found
from messaging.models import SubscriptionIn
from messaging.service import events, subscriptions
from messaging.web import answers
from messaging.web.deps import Svc, Who

router = APIRouter(tags=["live"])
EVENTS_PATH = "/v1/agents/me/events"


@router.get(EVENTS_PATH, response_model=None, response_class=EventSourceResponse)
async def agent_events(
    request: Request, svc: Svc, who: Who,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventSourceResponse:
    """The caller's live events (Server-Sent Events), resumable with ``Last-Event-ID``."""
    given = last_event_id or request.query_params.get("last_event_id")
    start = await events.start(svc.store, who, given)
    stream = uuid.uuid4().hex
    await events.claim(svc.store, who, stream)
    # The slot is given back after the response whatever happened, even when the
    # stream never started (a HEAD, or a client gone before the first event).
    return EventSourceResponse(events.stream(svc.store, svc.hub, who, stream, start),
                               ping=events.HEARTBEAT_S,
                               headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
                               background=BackgroundTask(events.release, svc.store, who, stream))


@router.post("/v1/subscriptions", status_code=201, response_model=answers.Subscription)
async def create_subscription(body: SubscriptionIn, svc: Svc, who: Who) -> JSONResponse:
    """One notice when the target next goes idle or exits, or when the time runs out."""
    made = await subscriptions.subscribe(svc.store, svc.settings, svc.publisher, who, body)
    return JSONResponse(made.body, status_code=made.status)


@router.get("/v1/subscriptions/{subscription_id}", response_model=answers.Subscription)
async def get_subscription(subscription_id: str, svc: Svc, who: Who) -> JSONResponse:
    """One subscription, for its subscriber."""
    project_id, agent_id = who.require_agent()
    found = await svc.store.live.get_subscription(project_id, subscription_id)
    if found is None or found["subscriber_id"] != agent_id:
        raise not_found("subscription")
    return JSONResponse(subscriptions.view(found))
