"""The API's answers as models, for its OpenAPI document (handlers answer plain JSON).

Each model names every field its answer carries, with its type: a field with no
default is in every answer (null when it says so), one with a default only in
some. ``extra="allow"`` because a later version may add fields (and a plug-in
transport its settings); tests/integration/test_answer_schemas.py compares
every route's real answer with its schema.
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
    store_full: bool = Field(description="the store has no room for writes")
    store_used_memory_bytes: int = Field(description="0 when the store does not answer")
    store_max_memory_bytes: int = Field(description="the store's maxmemory; 0: no limit")


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
    """An agent's transport: its kind, and for one that reaches out to an endpoint (all but
    the inbox) the endpoint's health; on registration its settings instead."""

    kind: str
    health: str | None = Field(default=None, description="healthy or unhealthy")
    failures_in_a_row: int | None = Field(default=None, description="the endpoint's failed "
                                          "attempts since its last success")
    url: str | None = Field(default=None, description="a webhook's URL, in the registration "
                            "answer only")
    secret: str | None = Field(default=None, description="a webhook's secret, shown once: in "
                               "the registration answer only")


class BoundSource(Answer):
    """The host conversation an agent is bound to, as it was registered."""

    kind: str
    thread_id: str | None = None
    title: str | None = None
    link: str | None = None


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
    bound_source: BoundSource | None
    parent: str | None = Field(description="the agent id of its parent; null for a session")
    inbound: str = Field(description="open, or hold (mail from other agents waits for the "
                         "project's human)")
    program: str | None
    model: str | None
    description: str | None
    registered_ts: str


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
    presence: str | None = Field(description="busy, idle, exited, source_lost or unknown; "
                                 "null while the target is pending")
    target: str = Field(description="pinned or pending")
    held: bool = Field(description="waiting for the project's human to release it")
    expires_ts: str | None = Field(default=None, description="a pending target's: when its "
                                   "name's authorization runs out")


class DeliveryReport(Answer):
    """What admission says of a send's deliveries."""

    policy: str
    note: str
    warnings: list[str]
    observations: list[Observation]


class SenderLocation(Answer):
    """Where the sender was: its project and the host conversation it is bound to."""

    project_key: str
    bound_source: BoundSource | None


class ResourceNotice(Answer):
    """A resource notice as it was sent (docs/http-api.md, Resource notices)."""

    resource_id: str
    phase_id: str
    state: str = Field(description="released or cancelled")
    next_action: str = Field(description="none, retry_admission or drop_dependency")


class MessageHead(Answer):
    """A message as the caller may see it, but for its body."""

    id: str
    project_id: str
    thread_id: str
    revision: int
    created_ts: str
    sender: str = Field(alias="from", description="the sender's exact address, `Name [ref]`: "
                        "copy it into `to` to reach that sender and no other")
    sender_name: str = Field(description="the sender's bare name")
    sender_id: str = Field(description="the sender's agent id (`human` for the project's human)")
    via: str | None = Field(default=None, description="the subagent that sent it under its "
                            "session's address (`from`), when it did")
    sender_location: SenderLocation
    to: list[str]
    cc: list[str]
    bcc: list[str]
    subject: str
    topic: str | None
    importance: str
    ack_required: bool
    delivery_policy: str
    notification_policy: str
    resource_notice: ResourceNotice | None
    summary: str | None = Field(default=None, description="the sender's own label: shown to "
                                "the sender (and the project) only")
    in_reply_to: str | None = Field(description="the message this one replies to")
    probe: bool


class Message(MessageHead):
    """A message as the caller may see it."""

    body_md: str


class Sent(Message):
    """A stored send, and what admission saw of its deliveries."""

    summary: str | None = Field(description="the sender's own label, never delivered")
    persisted: bool
    idempotent_replay: bool
    delivery: DeliveryReport


class InboxItem(Message):
    """A message in an inbox, with the recipient's delivery and marks."""

    delivery_id: str
    read_ts: str | None = None
    ack_ts: str | None = None
    pushed_ts: str | None = Field(default=None, description=(
        "when the recipient's host first pushed it into its session (not an observation)"))
    body_cut: bool | None = Field(default=None, description=(
        "true when body_max_chars cut body_md (absent otherwise)"))
    body_chars: int | None = Field(default=None, description=(
        "the whole body's length in characters, when body_md was cut"))


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


class HostEvent(Answer):
    """One thing the recipient's host did with a delivery, besides showing it."""

    kind: str = Field(description="pushed, resume_started, resume_ended or resume_failed")
    ts: str
    detail: str | None = None


class Delivery(Answer):
    """One delivery, stage by stage."""

    delivery_id: str
    message_id: str
    agent_id: str | None = Field(description="null while the target is pending")
    recipient: str
    transport: str | None = Field(description="null while the target is pending")
    notification_policy: str | None = Field(description="wake or quiet")
    stage: str
    stages: dict[str, str] = Field(description="each stage reached, with its timestamp")
    outcome: str | None = Field(description="accepted, rejected, failed or unknown")
    error: str | None = Field(description="why it ended without an attempt")
    attempts: list[Attempt]
    observed_ts: str | None
    pushed_ts: str | None = Field(description=(
        "when the recipient's host first pushed it into its session: not an observation"))
    host_events: list[HostEvent] = Field(description=(
        "what the recipient's host said it did with it, oldest first (the newest 20)"))
    read_ts: str | None
    ack_ts: str | None
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


class SubscriptionNotice(Answer):
    """The notice a subscription sent."""

    message_id: str
    delivery_id: str


class Subscription(Answer):
    """An idle subscription and where it stands."""

    subscription_id: str
    kind: str
    subscriber: str = Field(description="your address, `Name [ref]`")
    notice_to: str = Field(description="who sees the notice: you, or your_user when you hold "
                           "peer mail (the notice is then held for the project's human)")
    target: str = Field(description="the target's address, `Name [ref]`")
    target_id: str
    state: str = Field(description="waiting, notified or expired")
    outcome: str | None = Field(description="what the notice told once sent: idle, exited "
                                "or expired")
    created_ts: str
    expires_ts: str
    notified_ts: str | None
    ttl_s: int
    message_id: str | None = Field(description="the message sent with it, if any")
    notice: SubscriptionNotice | None = Field(description="the notice, once sent")
    message: Sent | None = Field(default=None, description="the message sent with it, in the "
                                 "answer that created it")


class SearchHit(Message):
    """A message a search found, with the words around what matched."""

    snippet: str


class SearchPage(Answer):
    """Messages matching a search, newest first."""

    messages: list[SearchHit]
    next_cursor: str | None


# A send repeated with its idempotency key answers 200 with the stored result.
REPLAY: dict[int | str, dict[str, Any]] = {
    200: {"model": Sent, "description": "an idempotent replay"}}
