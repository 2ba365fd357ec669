"""The HTTP API (docs/http-api.md): the app factory, its lifespan, error handlers and routers.

``create_app()`` builds the app; ``app`` is the one uvicorn serves
(``messaging.web.app:app``).
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.telemetry import TelemetryConfig
from starlette.exceptions import HTTPException
from starlette.routing import Route

from messaging import __version__
from messaging.config import OperatorTokenMissing, Settings, get_settings
from messaging.errors import CourierError, from_validation
from messaging.runtime import logs
from messaging.runtime.dataversion import check_at_start
from messaging.runtime.logs import quiet_per_event_logs
from messaging.runtime.publish import BatchPublisher, Publisher
from messaging.service.events import Hub
from messaging.service.rendering import Renderer
from messaging.store.durability import Durability, shortfalls
from messaging.store.store import Store
from messaging.web import openapi
from messaging.web.bodylimit import BodyLimit, request_cap
from messaging.web.deps import Services
from messaging.web.fairshare import FairShare, ProjectShare
from messaging.web.guard import Authenticate, Gate
from messaging.web.head import HeadAsGet
from messaging.web.mcp import MCP_PATH, mcp_app
from messaging.web.openapi import CourierAPI
from messaging.web.refusals import CountRefusals, error_response
from messaging.web.routes import (
    console,
    deliveries,
    docs,
    held,
    human,
    lanes,
    live,
    messages,
    names,
    ops,
    projects,
    search,
)
from messaging.web.sends import ServeSends

# Courier's metrics are Prometheus's (/metrics). FastAPI's OpenTelemetry hooks, on by
# default, look for configured providers on every request.
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}

# The publisher's thread (the broker's client is synchronous) shares the GIL with the
# event loop: at Python's default switch interval (5 ms) each of its turns could hold
# every request of the process that long; a tenth of that keeps the answers' tail short
# (bench: admission's p99).
GIL_SWITCH_S = 0.0005

# Errors raised by the framework itself (unknown route, undecodable body), in our shape.
FRAMEWORK_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "NOT_FOUND",
                   413: "BODY_TOO_LARGE", 422: "INVALID_ARGUMENT"}


async def _known_failure(request: Request, exc: Exception) -> JSONResponse:
    """A ``CourierError`` (the store's failures among them) in Courier's shape."""
    assert isinstance(exc, CourierError)
    return error_response(exc)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(from_validation(exc))


async def _framework_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = FRAMEWORK_CODES.get(exc.status_code, "INVALID_ARGUMENT")
    message = "no such path or method" if code == "NOT_FOUND" else str(exc.detail)
    err = CourierError(code, message, {"field": "body"} if code == "INVALID_ARGUMENT" else None)
    return error_response(err)


def create_app(settings: Settings | None = None) -> FastAPI:
    """A Courier API app: routers, MCP at ``/mcp``, one lifespan for everything it opens."""
    settings = settings or get_settings()
    mcp_endpoint, mcp_sessions = mcp_app(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        """Open the store, start the publisher and MCP's sessions; close them at shutdown."""
        quiet_per_event_logs(settings)
        # The server's own start lines go to uvicorn's logger, which every run shows.
        started = logging.getLogger("uvicorn.error")
        started.info("Courier data directory: %s", settings.data_dir.resolve())
        try:
            operator_token = settings.require_operator_token()
        except OperatorTokenMissing as exc:
            started.error("%s", exc)
            raise
        check_at_start(settings.store_url, "api")
        for shortfall in shortfalls(settings.store_url, Durability.of(settings)):
            started.warning("%s", shortfall)
        store = Store.from_url(settings.store_url, Durability.of(settings))
        publisher = BatchPublisher(Publisher(settings), store)
        publisher.start()
        svc = Services(settings, store, publisher, operator_token,
                       Gate(store, operator_token, settings.rate_limit_per_s),
                       Hub(store), Renderer(settings.render_processes, settings.render_budget_s))
        await svc.renderer.start()
        app.state.services = svc
        # What was loaded at start lives as long as the process: keep it out of
        # every collection, so a collection's pause stays short.
        gc.collect()
        gc.freeze()
        sys.setswitchinterval(GIL_SWITCH_S)
        try:
            async with mcp_sessions.run():
                yield
        finally:
            await publisher.stop()
            await svc.renderer.stop()
            await svc.hub.close()
            await svc.store.close()

    # MCP is an ASGI app of its own, declared beside the routers.
    mcp_route = Route(MCP_PATH, endpoint=mcp_endpoint, methods=["GET", "POST", "DELETE"])
    app = CourierAPI(title="Courier", version=__version__, description=openapi.DESCRIPTION,
                     lifespan=lifespan, routes=[mcp_route], telemetry=NO_TELEMETRY,
                     docs_url=None, redoc_url=None)  # served offline by the docs router
    # Outermost last. The caller is known from the headers first (Authenticate), then
    # the body is read at its pace (BodyLimit), then the project's requests past its
    # fair share wait before any work on them (ProjectShare), and a plain send is
    # admitted (ServeSends) ahead of the framework's exception layer and router.
    app.add_middleware(ServeSends)
    app.add_middleware(ProjectShare, streams=[live.EVENTS_PATH, MCP_PATH], share=FairShare())
    app.add_middleware(BodyLimit, max_bytes=request_cap(settings.max_body_bytes))
    app.add_middleware(Authenticate)
    # Outside them: every error answer, whoever made it, is counted on its way out.
    app.add_middleware(CountRefusals, faces={MCP_PATH: "mcp", live.EVENTS_PATH: "sse"})
    # Outside them: every layer sees a HEAD as the GET it stands for (its refusals are
    # counted like the GET's; only the body is dropped, here).
    app.add_middleware(HeadAsGet)
    app.add_exception_handler(CourierError, _known_failure)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _framework_error)
    # The routers' routes go on the app's own router, in the same order: an included
    # router is matched per request through FastAPI's include machinery, a cost every
    # request pays; the routes and the OpenAPI schema are the same either way.
    for module in (ops, projects, lanes, names, messages, deliveries, held, human, live, search,
                   console, docs):
        app.router.routes.extend(module.router.routes)
    return app



# Imported by uvicorn once it has set up its loggers, before its first line:
# from here on every line is in the deployment's format.
logs.setup("api", get_settings())
app = create_app()
