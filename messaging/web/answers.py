"""The API's answers as models, for its OpenAPI document (handlers answer plain JSON).

Each model names the fields a client can count on; ``extra="allow"`` because
an answer may carry more (fields added later, per-transport details).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    """Base of the answer models: more fields may come."""

    model_config = ConfigDict(extra="allow")


class ErrorDetail(Answer):
    """What went wrong: a code from the error table, one line for a person, the specifics."""

    code: str = Field(description="e.g. INVALID_ARGUMENT, RECIPIENT_NOT_FOUND, RATE_LIMITED")
    message: str
    details: dict[str, Any] | None = Field(
        default=None, description="the offending field (`field`), recipients, limits")


class Error(Answer):
    """Every error, whatever its status."""

    persisted: bool | None = Field(default=False, description=(
        "whether anything was stored; null when it may have been (a durability wait "
        "that timed out)"))
    error: ErrorDetail


class Ready(Answer):
    """``GET /readyz``."""

    ready: bool
    store: bool
    broker: bool


class ProjectCreated(Answer):
    """A new project and its token (shown once)."""

    project_id: str
    project_key: str
    name: str | None = None
    token: str


class Project(Answer):
    """A project, its lane and its backlog."""

    project_id: str
    project_key: str
    name: str | None
    created_ts: str
    lane: str | None = Field(description="null on the shared queues")
    backlog: dict[str, int] = Field(
        description="deliveries waiting for a worker, per installed transport")


class ProjectRow(Answer):
    """One project in the operator's list."""

    project_id: str
    project_key: str
    name: str | None
    agents: int = Field(description="active agents")
    lane: str | None = Field(description="null on the shared queues")
    backlog: dict[str, int] = Field(
        description="deliveries waiting for a worker, per installed transport")


class Projects(Answer):
    """A page of projects in id order; pass ``next_cursor`` back (null: the last page)."""

    projects: list[ProjectRow]
    next_cursor: str | None


class Transport(Answer):
    """An agent's transport as listed: its kind, and an endpoint's health."""

    kind: str
    health: str | None = None


class Agent(Answer):
    """An agent as the agent list shows it."""

    name: str
    ref: str
    agent_id: str
    label: str = Field(description="`Name [ref]`: always names exactly this agent")
    status: str = Field(description="active, retired or closed")
    presence: str = Field(description="busy, idle, exited, source_lost or unknown")
    last_active_ts: str
    transport: Transport
    bound_source: dict[str, Any] | None = None


class AgentRegistered(Agent):
    """An agent and its new token (shown once; on registration a webhook secret made for it too)."""

    project_id: str
    token: str


class Agents(Answer):
    """``{"agents": [...]}``."""

    agents: list[Agent]


class Observation(Answer):
    """What admission saw of one recipient's delivery."""

    delivery_id: str
    recipient: str
    agent_id: str | None = Field(description="null while the target is pending")
    transport: str | None = Field(description="null while the target is pending")
    stage: str
    presence: str | None = None


class DeliveryReport(Answer):
    """What admission says of a send's deliveries."""

    policy: str
    warnings: list[str]
    observations: list[Observation]


class MessageHead(Answer):
    """A message as the caller may see it, but for its body."""

    id: str
    project_id: str
    thread_id: str
    created_ts: str
    sender: str = Field(alias="from", description="the sender's exact address, `Name [ref]`: "
                        "copy it into `to` to reach that sender and no other")
    sender_name: str = Field(description="the sender's bare name")
    via: str | None = Field(default=None, description="the subagent that sent it under its "
                            "session's address (`from`), when it did")
    to: list[str]
    cc: list[str]
    bcc: list[str]
    subject: str
    topic: str | None = None
    importance: str
    ack_required: bool
    notification_policy: str


class Message(MessageHead):
    """A message as the caller may see it."""

    body_md: str


class Sent(Message):
    """A stored send, and what admission saw of its deliveries."""

    persisted: bool
    idempotent_replay: bool
    delivery: DeliveryReport


class InboxItem(Message):
    """A message in an inbox, with the recipient's delivery and marks."""

    delivery_id: str
    read_ts: str | None = None
    ack_ts: str | None = None


class InboxPage(Answer):
    """One page of an inbox; pass ``next_cursor`` back for what comes after."""

    messages: list[InboxItem]
    next_cursor: str


class Thread(Answer):
    """One page of a thread's messages the caller may see, oldest first; pass
    ``next_cursor`` back for what comes after."""

    thread_id: str
    messages: list[Message]
    next_cursor: str
    more: bool = Field(description="The thread held more messages past this page "
                                   "when it was read")


class RenderedMessage(MessageHead):
    """A message with its Markdown as sanitized HTML (in place of ``body_md``)."""

    body_html: str


class RenderedThread(Answer):
    """One page of a thread as the console shows it, oldest first."""

    thread_id: str
    messages: list[RenderedMessage]
    next_cursor: str
    more: bool


class Marks(Answer):
    """The read and acknowledgement times of a received message."""

    message_id: str
    delivery_id: str
    read_ts: str | None
    ack_ts: str | None


class Attempt(Answer):
    """One try of a delivery."""

    n: int
    started_ts: str | None
    ended_ts: str | None
    outcome: str | None = Field(default=None, description="accepted, rejected, failed, unknown, "
                                "or retry (failed before hand-off, tried again); null while "
                                "it runs")
    error: str | None = None


class Delivery(Answer):
    """One delivery, stage by stage."""

    delivery_id: str
    message_id: str
    agent_id: str | None = Field(description="null while the target is pending")
    recipient: str
    transport: str | None = Field(description="null while the target is pending")
    stage: str
    stages: dict[str, str] = Field(description="each stage reached, with its timestamp")
    outcome: str | None = Field(description="accepted, rejected, failed or unknown")
    attempts: list[Attempt]
    observed_ts: str | None
    target: str = Field(description="pinned or pending")
    held: bool = Field(description="waiting for the project's human to release it")


class Deliveries(Answer):
    """A message's deliveries."""

    message_id: str
    deliveries: list[Delivery]


class HeldDelivery(Delivery):
    """A held delivery with its message."""

    message: Message


class Held(Answer):
    """The project's held deliveries, oldest first."""

    deliveries: list[HeldDelivery]


class NameAllowed(Answer):
    """A name authorized before any agent has it, and until when."""

    name: str
    expires_ts: str


class AuthorizedName(NameAllowed):
    """An authorized name and how much mail waits for it."""

    waiting: int = Field(description="deliveries waiting for the name's first agent")


class Names(Answer):
    """The project's authorized names, soonest expiry first."""

    names: list[AuthorizedName]


class NameEnded(Answer):
    """An authorization ended."""

    name: str
    deleted: bool


class Subscription(Answer):
    """An idle subscription and where it stands."""

    subscription_id: str
    kind: str
    target: str
    notice_to: str = Field(description="who sees the notice: you, or your_user when you hold "
                           "peer mail (the notice is then held for the project's human)")
    state: str = Field(description="waiting, notified or expired")
    expires_ts: str
    message: Sent | None = Field(default=None, description="the message sent with it, if any")


class SearchPage(Answer):
    """Messages matching a search, newest first."""

    messages: list[dict[str, Any]]
    next_cursor: str | None


# A send repeated with its idempotency key answers 200 with the stored result.
REPLAY: dict[int | str, dict[str, Any]] = {
    200: {"model": Sent, "description": "an idempotent replay"}}
