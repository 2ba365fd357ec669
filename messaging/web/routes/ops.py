"""Operations: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from messaging.errors import CourierError
from messaging.runtime.celeryconf import transport_kinds
from messaging.service.caller import CallerKind
from messaging.web import answers, metrics
from messaging.web.deps import Svc, ok
from messaging.web.guard import auth_of

router = APIRouter(tags=["operations"])

# How long /readyz and /metrics wait for the broker.
BROKER_PROBE_TIMEOUT_S = 3.0


@router.get("/healthz", response_class=PlainTextResponse)
async def healthz() -> PlainTextResponse:
    """The process is up."""
    return PlainTextResponse("ok\n")


@router.get("/readyz", response_model=answers.Ready,
            responses={503: {"model": answers.Ready, "description": "not ready"}})
async def readyz(svc: Svc) -> JSONResponse:
    """The store and the broker both answer, and the store has room for writes."""
    used, limit = 0, 0
    try:
        store_ok = await svc.store.ping()
        used, limit = await svc.store.memory()
    except CourierError:  # STORE_UNAVAILABLE: it did not answer
        store_ok = False
    full = metrics.store_full(used, limit, svc.settings.max_body_bytes)
    try:
        broker_ok = await asyncio.wait_for(
            asyncio.to_thread(svc.publisher.publisher.ping), BROKER_PROBE_TIMEOUT_S)
    except TimeoutError:
        broker_ok = False
    ready = store_ok and broker_ok and not full
    return ok({"ready": ready, "store": store_ok, "broker": broker_ok, "store_full": full,
               "store_used_memory_bytes": used, "store_max_memory_bytes": limit},
              200 if ready else 503)


@router.get("/metrics", response_class=PlainTextResponse)
async def prometheus(request: Request, svc: Svc) -> PlainTextResponse:
    """Prometheus text: admissions here, deliveries and queues of the deployment.

    Lanes and projects are named to the operator token only (``messaging.web.metrics``);
    a token that is not one is 401, as on every route.
    """
    auth = auth_of(request.scope)
    if auth.refusal is not None:  # a token was sent and is not one: said, not ignored
        raise auth.refusal
    named = auth.caller is not None and auth.caller.kind is CallerKind.OPERATOR
    totals, due, unindexed = await svc.store.delivery_counters()
    memory = await svc.store.memory()
    kinds = transport_kinds()
    backlogs = await metrics.busiest_backlogs(svc.store, kinds) if named else []
    try:
        depths = await asyncio.wait_for(
            asyncio.to_thread(svc.publisher.publisher.queue_depths), BROKER_PROBE_TIMEOUT_S)
    except Exception:  # broker unreachable: the other figures still help
        depths = {}
    if not named:
        depths = metrics.without_lanes(depths, kinds)
    disk = await asyncio.to_thread(metrics.disk_bytes, svc.settings.archive_root,
                                   svc.settings.data_dir)
    return PlainTextResponse(metrics.render(totals, due, depths, memory, backlogs,
                                              unindexed, disk).decode(),
                             media_type="text/plain; version=0.0.4")
