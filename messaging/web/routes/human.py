"""The project's human: sending as ``human`` and the human inbox (project token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from messaging.models import InboxRead, SendIn
from messaging.service import human
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["human"])


@router.post("/v1/projects/{project_id}/messages", status_code=201, response_model=answers.Sent,
             responses=answers.REPLAY)
async def send_as_human(project_id: str, body: SendIn, svc: Svc, who: Who) -> JSONResponse:
    """Send as the project's human (always wake)."""
    sent = await human.send_as_human(svc.store, svc.settings, svc.publisher, who, project_id,
                                     body)
    return ok(sent.body, sent.status)


@router.get("/v1/projects/{project_id}/human/inbox", response_model=answers.InboxPage)
async def human_inbox(project_id: str, q: Annotated[InboxRead, Query()], svc: Svc,
                      who: Who) -> JSONResponse:
    """A page of the human inbox, oldest first; observed unless the caller says it does not
    show it (``shown=false``)."""
    return ok(await human.human_inbox(svc.store, who, project_id, q, shown=q.shown))
