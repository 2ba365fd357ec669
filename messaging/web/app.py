"""The HTTP API of API.md: thin FastAPI handlers over the service modules."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
import redis.exceptions
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from messaging.config import Settings, get_settings
from messaging.errors import CourierError, store_unavailable
from messaging.models import AgentIn, InboxQuery, PresenceIn, ProjectIn, ReplyIn, SendIn, field_path
from messaging.runtime.publish import BatchPublisher, Publisher
from messaging.service import directory, reading, redrive, sending
from messaging.service.caller import Caller, authenticate, bearer
from messaging.store.store import Store
from messaging.web import metrics
from messaging.web.ratelimit import RateLimiter

# JSON escapes may make a body up to six times its text; the rest is headroom.
REQUEST_BYTES_FACTOR = 6
REQUEST_BYTES_HEADROOM = 64 * 1024


@dataclass
class Services:
    """What the handlers need, built once per process."""

    settings: Settings
    store: Store
    publisher: BatchPublisher
    operator_token: str
    limiter: RateLimiter


async def services(request: Request) -> Services:
    """The process's services (async: a plain def would run in a thread per request)."""
    found: Services = request.app.state.services
    return found


async def caller(request: Request) -> Caller:
    """The caller of this request, from its bearer token."""
    svc = await services(request)
    header = request.headers.get("authorization")
    token = bearer(header)
    if token is not None:
        svc.limiter.check(token)
    return await authenticate(svc.store, svc.operator_token, header)


Svc = Annotated[Services, Depends(services)]
Who = Annotated[Caller, Depends(caller)]


class FastJSONResponse(JSONResponse):
    """JSON rendered by orjson: the same UTF-8 text, several times faster."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def ok(body: dict[str, Any], status: int = 200) -> JSONResponse:
    """A JSON answer."""
    return FastJSONResponse(body, status_code=status)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the store and start the publisher; close both at shutdown."""
    settings = get_settings()
    publisher = BatchPublisher(Publisher(settings))
    publisher.start()
    svc = Services(settings, Store.from_url(settings.store_url), publisher,
                   settings.resolve_operator_token(), RateLimiter(settings.rate_limit_per_s))
    app.state.services = svc
    # What was loaded at start lives as long as the process: keep it out of
    # every collection, so a collection's pause stays short.
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        publisher.stop()
        await svc.store.close()


class BodyLimit:
    """Refuses a request body far larger than the largest message allowed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        limit = get_settings().max_body_bytes
        self.max_bytes = limit * REQUEST_BYTES_FACTOR + REQUEST_BYTES_HEADROOM

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                    err = CourierError("BODY_TOO_LARGE", "the request body is too large",
                                       {"max_bytes": self.max_bytes})
                    await ok(err.body(), err.status)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


app = FastAPI(title="Courier", version="1", lifespan=lifespan)
app.add_middleware(BodyLimit)


def _is_send(request: Request) -> bool:
    path = request.url.path
    return request.method == "POST" and (path == "/v1/messages" or path.endswith("/reply"))


@app.exception_handler(CourierError)
async def _courier_error(request: Request, exc: CourierError) -> JSONResponse:
    if _is_send(request):
        metrics.count_admission(exc.code)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


@app.exception_handler(RequestValidationError)
async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [
        {"field": field_path(tuple(e["loc"])), "message": e["msg"], "type": e["type"]}
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"field": "body", "message": "invalid request"}
    err = CourierError(
        "INVALID_ARGUMENT", f"{first['field']}: {first['message']}",
        {"field": first["field"], "errors": errors},
    )
    return JSONResponse(err.body(), status_code=err.status)


# Errors raised by the framework itself (unknown route, undecodable body), in our shape.
FRAMEWORK_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "NOT_FOUND",
                   413: "BODY_TOO_LARGE", 422: "INVALID_ARGUMENT"}


@app.exception_handler(HTTPException)
async def _framework_error(request: Request, exc: HTTPException) -> JSONResponse:
    code = FRAMEWORK_CODES.get(exc.status_code, "INVALID_ARGUMENT")
    message = "no such path or method" if code == "NOT_FOUND" else str(exc.detail)
    err = CourierError(code, message, {"field": "body"} if code == "INVALID_ARGUMENT" else None)
    return JSONResponse(err.body(), status_code=err.status)


@app.exception_handler(redis.exceptions.ConnectionError)
@app.exception_handler(redis.exceptions.TimeoutError)
async def _store_down(request: Request, exc: Exception) -> JSONResponse:
    err = store_unavailable()
    return JSONResponse(err.body(), status_code=err.status)


# operations


@app.get("/healthz")
async def healthz() -> PlainTextResponse:
    """The process is up."""
    return PlainTextResponse("ok\n")


# How long /readyz and /metrics wait for the broker.
BROKER_PROBE_TIMEOUT_S = 3.0


@app.get("/readyz")
async def readyz(svc: Svc) -> JSONResponse:
    """The store and the broker both answer."""
    try:
        store_ok = await svc.store.ping()
    except redis.exceptions.RedisError:
        store_ok = False
    try:
        broker_ok = await asyncio.wait_for(
            asyncio.to_thread(svc.publisher.publisher.ping), BROKER_PROBE_TIMEOUT_S)
    except TimeoutError:
        broker_ok = False
    ready = store_ok and broker_ok
    return ok({"ready": ready, "store": store_ok, "broker": broker_ok}, 200 if ready else 503)


@app.get("/metrics")
async def prometheus(svc: Svc) -> PlainTextResponse:
    """Prometheus text: admissions here, deliveries and queues of the deployment."""
    totals, due = await metrics.store_counters(svc.store)
    try:
        depths = await asyncio.wait_for(
            asyncio.to_thread(svc.publisher.publisher.queue_depths), BROKER_PROBE_TIMEOUT_S)
    except Exception:  # broker unreachable: the other figures still help
        depths = {}
    return PlainTextResponse(metrics.render(totals, due, depths).decode(),
                             media_type="text/plain; version=0.0.4")


# projects and agents


@app.post("/v1/projects", status_code=201)
async def create_project(body: ProjectIn, svc: Svc, who: Who) -> JSONResponse:
    """Create a project (operator)."""
    return ok(await directory.create_project(svc.store, who, body), 201)


@app.post("/v1/projects/{project_id}/agents", status_code=201)
async def register_agent(project_id: str, body: AgentIn, svc: Svc, who: Who) -> JSONResponse:
    """Register an agent (project token)."""
    return ok(await directory.register_agent(svc.store, svc.settings, who, project_id, body), 201)


@app.get("/v1/projects/{project_id}/agents")
async def list_agents(project_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The project's agents."""
    return ok(await directory.list_agents(svc.store, who, project_id))


@app.post("/v1/projects/{project_id}/agents/{agent_id}/retire")
async def retire_agent(project_id: str, agent_id: str, svc: Svc, who: Who) -> JSONResponse:
    """No new mail for this agent."""
    return ok(await directory.set_status(svc.store, who, project_id, agent_id, "retired"))


@app.post("/v1/projects/{project_id}/agents/{agent_id}/close")
async def close_agent(project_id: str, agent_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The agent's host conversation is gone for good."""
    return ok(await directory.set_status(svc.store, who, project_id, agent_id, "closed"))


@app.put("/v1/agents/me/presence")
async def presence(body: PresenceIn, svc: Svc, who: Who) -> JSONResponse:
    """What the agent's host says of it."""
    return ok(await directory.set_presence(svc.store, who, body, svc.publisher))


# messages


@app.post("/v1/messages", status_code=201)
async def send_message(body: SendIn, svc: Svc, who: Who) -> JSONResponse:
    """Admit a message."""
    sent = await sending.send(svc.store, svc.settings, svc.publisher, who, body)
    metrics.count_admission("replayed" if sent.status == 200 else "admitted")
    return ok(sent.body, sent.status)


@app.post("/v1/messages/{message_id}/reply", status_code=201)
async def reply_message(message_id: str, body: ReplyIn, svc: Svc, who: Who) -> JSONResponse:
    """Reply in the message's thread, to its sender."""
    sent = await sending.reply(svc.store, svc.settings, svc.publisher, who, message_id, body)
    metrics.count_admission("replayed" if sent.status == 200 else "admitted")
    return ok(sent.body, sent.status)


@app.get("/v1/messages/{message_id}")
async def get_message(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """One message, as the caller may see it."""
    return ok(await reading.get_message(svc.store, who, message_id))


@app.post("/v1/messages/{message_id}/read")
async def mark_read(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Mark a received message read."""
    return ok(await reading.mark(svc.store, who, message_id, "read"))


@app.post("/v1/messages/{message_id}/ack")
async def mark_ack(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Acknowledge a received message."""
    return ok(await reading.mark(svc.store, who, message_id, "ack"))


@app.get("/v1/messages/{message_id}/deliveries")
async def message_deliveries(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The deliveries of one message."""
    return ok(await reading.message_deliveries(svc.store, who, message_id))


@app.get("/v1/threads/{thread_id}")
async def get_thread(thread_id: str, svc: Svc, who: Who) -> JSONResponse:
    """A thread's messages the caller may see."""
    return ok(await reading.get_thread(svc.store, who, thread_id))


@app.get("/v1/agents/me/inbox")
async def get_inbox(q: Annotated[InboxQuery, Query()], svc: Svc, who: Who) -> JSONResponse:
    """A page of the caller's inbox."""
    return ok(await reading.inbox(svc.store, who, q))


# deliveries


@app.get("/v1/deliveries/{delivery_id}")
async def get_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """What happened to one delivery, stage by stage."""
    return ok(await reading.get_delivery(svc.store, who, delivery_id))


@app.post("/v1/deliveries/{delivery_id}/redrive")
async def redrive_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Send a delivery again on the same route with the same id (project token)."""
    return ok(await redrive.redrive(svc.store, svc.publisher, who, delivery_id))


@app.post("/v1/deliveries/{delivery_id}/observed")
async def mark_observed(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The recipient's host showed this delivery."""
    return ok(await reading.observed(svc.store, who, delivery_id))


from messaging.web.live import install  # noqa: E402 - needs the app above

install(app)
