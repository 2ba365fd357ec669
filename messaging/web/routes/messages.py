"""Messages: sending, replying, reading, marking, threads and the inbox."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from messaging.models import InboxRead, ReplyIn, SendIn, ThreadQuery
from messaging.service import reading, sending
from messaging.web import answers
from messaging.web.deps import Svc, Who, ok

router = APIRouter(tags=["messages"])


async def send_message(body: SendIn, svc: Svc, who: Who) -> JSONResponse:
    """Admit a message."""
    sent = await sending.send(svc.store, svc.settings, svc.publisher, who, body)
    return ok(sent.body, sent.status)


# The request agents make most: its plain case is served by the innermost layer
# (messaging.web.sends), the rest by FastAPI's handler, here.
router.add_api_route("/v1/messages", send_message, methods=["POST"], status_code=201,
                     response_model=answers.Sent, responses=answers.REPLAY)


@router.post("/v1/messages/{message_id}/reply", status_code=201, response_model=answers.Sent,
             responses=answers.REPLAY)
async def reply_message(message_id: str, body: ReplyIn, svc: Svc, who: Who) -> JSONResponse:
    """Reply in the message's thread, to its sender."""
    sent = await sending.reply(svc.store, svc.settings, svc.publisher, who, message_id, body)
    return ok(sent.body, sent.status)


@router.get("/v1/messages/{message_id}", response_model=answers.Message)
async def get_message(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """One message, as the caller may see it."""
    return ok(await reading.get_message(svc.store, svc.settings, who, message_id))


@router.post("/v1/messages/{message_id}/read", response_model=answers.Marks)
async def mark_read(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Mark a received message read."""
    return ok(await reading.mark(svc.store, svc.settings, who, message_id, "read"))


@router.post("/v1/messages/{message_id}/ack", response_model=answers.Marks)
async def mark_ack(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """Acknowledge a received message."""
    return ok(await reading.mark(svc.store, svc.settings, who, message_id, "ack"))


@router.get("/v1/messages/{message_id}/deliveries", response_model=answers.Deliveries)
async def message_deliveries(message_id: str, svc: Svc, who: Who) -> JSONResponse:
    """The deliveries of one message."""
    return ok(await reading.message_deliveries(svc.store, svc.settings, who, message_id))


@router.get("/v1/threads/{thread_id}", response_model=answers.Thread)
async def get_thread(thread_id: str, q: Annotated[ThreadQuery, Query()], svc: Svc,
                     who: Who) -> JSONResponse:
    """A page of the thread's messages the caller may see, oldest first.

    A page ends after ``limit`` messages or once it holds 4 MiB of messages (one
    message at least); ``more`` says whether the thread goes on past it.
    """
    return ok(await reading.get_thread(svc.store, who, thread_id, q.cursor, q.limit))


@router.get("/v1/agents/me/inbox", response_model=answers.InboxPage)
async def get_inbox(q: Annotated[InboxRead, Query()], svc: Svc, who: Who) -> JSONResponse:
    """A page of the caller's inbox; observed unless the caller says it does not show it
    to the agent (``shown=false``)."""
    return ok(await reading.inbox(svc.store, who, q, shown=q.shown))
