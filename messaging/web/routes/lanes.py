"""Busy projects: a project's lane and backlog (operators)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from messaging.models import LaneIn
from messaging.service import lanes
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["busy projects"])


@router.get("/v1/projects/{project_id}", response_model=answers.Project)
async def get_project(project_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The project, its lane and its backlog per transport (operator or project)."""
    return ok(await lanes.project_view(svc.store, who, project_id))


@router.put("/v1/projects/{project_id}/lane", response_model=answers.Project)
async def put_lane(project_id: str, body: LaneIn, svc: Svc, who: Who) -> JSONResponse:
    """Serve the project's deliveries from queues of its own (operator)."""
    return ok(await lanes.set_lane(svc.store, svc.publisher.publisher.move_lane, who,
                                   project_id, body.lane))


@router.delete("/v1/projects/{project_id}/lane", response_model=answers.Project)
async def delete_lane(project_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Back to the shared queues (operator)."""
    return ok(await lanes.set_lane(svc.store, svc.publisher.publisher.move_lane, who,
                                   project_id, ""))
