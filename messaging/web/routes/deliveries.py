"""Deliveries: what happened, redrive, observation, and settling held ones."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from messaging.models import HostEventIn
from messaging.service import held, reading, redrive
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["deliveries"])


@router.get("/v1/deliveries/{delivery_id}", response_model=answers.Delivery)
async def get_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """What happened to one delivery, stage by stage."""
    return ok(await reading.get_delivery(svc.store, svc.settings, who, delivery_id))


@router.post("/v1/deliveries/{delivery_id}/redrive", response_model=answers.Delivery)
async def redrive_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Send a delivery again on the same route with the same id (project token)."""
    return ok(await redrive.redrive(svc.store, svc.publisher, who, delivery_id))


@router.post("/v1/deliveries/{delivery_id}/observed", response_model=answers.Delivery)
async def mark_observed(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The recipient's host showed this delivery."""
    return ok(await reading.observed(svc.store, svc.settings, who, delivery_id))


@router.post("/v1/deliveries/{delivery_id}/host-events", response_model=answers.Delivery)
async def record_host_event(delivery_id: str, event: HostEventIn, svc: Svc,
                            who: Who) -> JSONResponse:
    """The recipient's host says what else it did with this delivery (pushed it into its
    session, resumed the session for it): recorded among its host events, not observed."""
    return ok(await reading.host_event(svc.store, svc.settings, who, delivery_id, event))


@router.post("/v1/deliveries/{delivery_id}/release", response_model=answers.Delivery,
             tags=["held mail"])
async def release_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Let a held delivery go to its recipient (project token)."""
    return ok(await held.settle(svc.store, svc.settings, svc.publisher, who, delivery_id,
                                "release"))


@router.post("/v1/deliveries/{delivery_id}/decline", response_model=answers.Delivery,
             tags=["held mail"])
async def decline_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Refuse a held delivery: it ends rejected, never shown (project token)."""
    return ok(await held.settle(svc.store, svc.settings, svc.publisher, who, delivery_id,
                                "decline"))
