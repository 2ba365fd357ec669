"""Names not yet registered: authorize, list, end (project token)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from messaging.models import NameAllowIn
from messaging.service import names
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["names"])


@router.put("/v1/projects/{project_id}/names/{name}", response_model=answers.NameAllowed)
async def allow_name(project_id: str, name: str, body: NameAllowIn, svc: Svc,
                     who: Who) -> JSONResponse:
    """Authorize a name before any agent has it (project token)."""
    return ok(await names.allow(svc.store, who, project_id, name, body))


@router.get("/v1/projects/{project_id}/names", response_model=answers.Names)
async def list_names(project_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The project's authorized names (project token)."""
    return ok(await names.list_names(svc.store, who, project_id))


@router.delete("/v1/projects/{project_id}/names/{name}", response_model=answers.NameEnded)
async def end_name(project_id: str, name: str, svc: Svc, who: Who) -> JSONResponse:
    """End an authorization; mail waiting for it fails (project token)."""
    return ok(await names.end(svc.store, who, project_id, name))
