"""Projects and agents: creation, the operator's list, tokens, registration, status,
presence."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from messaging.models import INBOX_LIMIT_MAX, AgentIn, PresenceIn, ProjectIn
from messaging.service import directory, projects
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["projects and agents"])


@router.post("/v1/projects", status_code=201, response_model=answers.ProjectCreated)
async def create_project(body: ProjectIn, svc: Svc, who: Who) -> JSONResponse:
    """Create a project (operator)."""
    return ok(await directory.create_project(svc.store, who, body), 201)


@router.get("/v1/projects", response_model=answers.Projects)
async def list_projects(
    svc: Svc, who: Who,
    cursor: Annotated[str | None, Query(description="a next_cursor from before")] = None,
    limit: Annotated[int, Query(ge=1, le=INBOX_LIMIT_MAX)] = 50,
) -> JSONResponse:
    """Every project, a page at a time, with its agents, lane and backlog (operator)."""
    return ok(await projects.list_projects(svc.store, who, cursor, limit))


@router.post("/v1/projects/{project_id}/token", status_code=201,
             response_model=answers.ProjectCreated)
async def new_project_token(project_id: str, svc: Svc, who: Who) -> JSONResponse:
    """A new project token, shown once; the old one stops working at once (operator)."""
    return ok(await projects.new_project_token(svc.store, who, project_id), 201)


@router.post("/v1/projects/{project_id}/agents", status_code=201,
             response_model=answers.AgentRegistered)
async def register_agent(project_id: str, body: AgentIn, svc: Svc, who: Who) -> JSONResponse:
    """Register an agent (project token)."""
    return ok(await directory.register_agent(svc.store, svc.settings, who, project_id, body,
                                             svc.publisher), 201)


@router.get("/v1/projects/{project_id}/agents", response_model=answers.Agents)
async def list_agents(project_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The project's agents."""
    return ok(await directory.list_agents(svc.store, who, project_id))


@router.post("/v1/projects/{project_id}/agents/{agent_id}/retire", response_model=answers.Agent)
async def retire_agent(project_id: str, agent_id: str, svc: Svc, who: Who) -> JSONResponse:
    """No new mail for this agent."""
    return ok(await directory.set_status(svc.store, who, project_id, agent_id, "retired"))


@router.post("/v1/projects/{project_id}/agents/{agent_id}/close", response_model=answers.Agent)
async def close_agent(project_id: str, agent_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The agent's host conversation is gone for good."""
    return ok(await directory.set_status(svc.store, who, project_id, agent_id, "closed"))


@router.post("/v1/projects/{project_id}/agents/{agent_id}/token", status_code=201,
             response_model=answers.AgentRegistered)
async def rotate_token(project_id: str, agent_id: str, svc: Svc, who: Who) -> JSONResponse:
    """A new token for the agent; the old one stops working at once (project token)."""
    return ok(await directory.rotate_token(svc.store, who, project_id, agent_id), 201)


@router.put("/v1/agents/me/presence", response_model=answers.Agent)
async def presence(body: PresenceIn, svc: Svc, who: Who) -> JSONResponse:
    """What the agent's host says of it."""
    return ok(await directory.set_presence(svc.store, svc.settings, who, body, svc.publisher))
