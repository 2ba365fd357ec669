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

    persisted: bool = Field(default=False, description="whether anything was stored")
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
    """A new agent and its token (shown once; a generated webhook secret too)."""

    project_id: str
    token: str


class Agents(Answer):
    """``{"agents": [...]}``."""

    agents: list[Agent]


class Observation(Answer):
    """What admission saw of one recipient's delivery."""

    delivery_id: str
    recipient: str
    agent_id: str | None
    transport: str
    stage: str
    presence: str | None = None


class DeliveryReport(Answer):
    """What admission says of a send's deliveries."""

    policy: str
    warnings: list[str]
    observations: list[Observation]


class Message(Answer):
    """A message as the caller may see it."""

    id: str
    project_id: str
    thread_id: str
    created_ts: str
    sender: str = Field(alias="from")
    to: list[str]
    cc: list[str]
    bcc: list[str]
    subject: str
    body_md: str
    topic: str | None = None
    importance: str
    ack_required: bool
    notification_policy: str


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
    """A thread's messages the caller may see, oldest first."""

    thread_id: str
    messages: list[Message]


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
    error: str | None = None


class Delivery(Answer):
    """One delivery, stage by stage."""

    delivery_id: str
    message_id: str
    agent_id: str | None
    recipient: str
    transport: str
    stage: str
    stages: dict[str, str] = Field(description="each stage reached, with its timestamp")
    outcome: str | None = Field(description="accepted, rejected, failed or unknown")
    attempts: list[Attempt]
    observed_ts: str | None


class Deliveries(Answer):
    """A message's deliveries."""

    message_id: str
    deliveries: list[Delivery]


class Subscription(Answer):
    """An idle subscription and where it stands."""

    subscription_id: str
    kind: str
    target: str
    state: str = Field(description="waiting, notified or expired")
    expires_ts: str
    message: Sent | None = Field(default=None, description="the message sent with it, if any")


class SearchPage(Answer):
    """Messages matching a search, newest first."""

    messages: list[dict[str, Any]]
    next_cursor: str | None
