"""Search: an agent's own mail, and the whole project's for its token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from messaging.models import SearchQuery
from messaging.service import search
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["search"])


@router.get("/v1/agents/me/search", response_model=answers.SearchPage)
async def search_mine(q: Annotated[SearchQuery, Query()], svc: Svc, who: Who) -> JSONResponse:
    """What the caller sent or received, by words, topic, sender and time, newest first."""
    return ok(await search.search(svc.store, who, q))


@router.get("/v1/projects/{project_id}/search", response_model=answers.SearchPage)
async def search_project(project_id: str, q: Annotated[SearchQuery, Query()], svc: Svc,
                         who: Who) -> JSONResponse:
    """Every message of the project (its token), searched like an agent's."""
    return ok(await search.search_project(svc.store, who, project_id, q))
