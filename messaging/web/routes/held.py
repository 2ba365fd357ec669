"""Held mail: the project's list (release and decline are delivery routes)."""

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
