"""Held mail: list, release, decline (project token)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from messaging.service import held
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["held mail"])


@router.get("/v1/projects/{project_id}/held", response_model=answers.Held)
async def list_held(project_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Held deliveries, oldest first, with their messages (project token)."""
    return ok(await held.list_held(svc.store, who, project_id))


@router.post("/v1/deliveries/{delivery_id}/release", response_model=answers.Delivery)
async def release_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Let a held delivery go to its recipient (project token)."""
    return ok(await held.settle(svc.store, svc.publisher, who, delivery_id, "release"))


@router.post("/v1/deliveries/{delivery_id}/decline", response_model=answers.Delivery)
async def decline_delivery(delivery_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Refuse a held delivery: it ends rejected, never shown (project token)."""
    return ok(await held.settle(svc.store, svc.publisher, who, delivery_id, "decline"))
