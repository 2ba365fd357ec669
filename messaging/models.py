"""Request models of the HTTP contract (API.md); no extra fields, strict types."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

NAME_MAX = 64
RECIPIENTS_MAX = 100
SUBJECT_MAX = 200
SUMMARY_MAX = 200
IDEMPOTENCY_KEY_MAX = 255
INBOX_LIMIT_MAX = 500

TOPIC_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
THREAD_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
NOTICE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,95}$")
LABEL_RE = re.compile(r"^(?P<name>.+) \[(?P<ref>[0-9a-f]{6})\]$")


class Importance(StrEnum):
    """How much a message matters to its recipients."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    URGENT = "urgent"


class NotificationPolicy(StrEnum):
    """Whether a delivery may wake the recipient's host."""

    WAKE = "wake"  # may wake the recipient's host
    QUIET = "quiet"  # stored for inbox and search, wakes no one


class DeliveryPolicy(StrEnum):
    """The sender's delivery policy; both store and deliver the same way today."""

    CHECKED = "checked"
    DURABLE = "durable"


class Presence(StrEnum):
    """What an agent's host last said of it."""

    BUSY = "busy"
    IDLE = "idle"
    EXITED = "exited"  # not death: mail waits for the host to resume it
    SOURCE_LOST = "source_lost"  # its bound thread or session is gone


def _one_line(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("must be one line")
    return value


def check_name(value: str) -> str:
    """An agent name: 1-64 characters, one line, no brackets, no outer spaces."""
    _one_line(value)
    if "[" in value or "]" in value:
        raise ValueError("must not contain [ or ]")
    if value != value.strip():
        raise ValueError("must not start or end with white space")
    return value


def check_recipient(value: str) -> str:
    """A recipient: ``Name``, ``Name [ref]`` or an agent id."""
    _one_line(value)
    if value.startswith("agt_"):
        return value
    match = LABEL_RE.match(value)
    check_name(match.group("name") if match else value)
    return value


Strict = ConfigDict(extra="forbid", strict=True)
OneLine = Annotated[str, AfterValidator(_one_line)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=NAME_MAX), AfterValidator(check_name)]
Recipient = Annotated[
    str, StringConstraints(min_length=1, max_length=NAME_MAX + 20), AfterValidator(check_recipient)
]


class ProjectIn(BaseModel):
    """``POST /v1/projects``."""

    model_config = Strict
    project_key: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    name: Annotated[OneLine, StringConstraints(min_length=1, max_length=200)] | None = None

    @field_validator("project_key")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path")
        return _one_line(value)


class InboxTransportIn(BaseModel):
    """Mail waits in the agent's inbox."""

    model_config = Strict
    kind: Literal["inbox"]


class WebhookTransportIn(BaseModel):
    """Mail is POSTed to a URL, signed with the secret."""

    model_config = Strict
    kind: Literal["webhook"]
    url: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    secret: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = None


class BoundSourceIn(BaseModel):
    """The host conversation an agent is bound to."""

    model_config = Strict
    kind: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    thread_id: Annotated[OneLine, StringConstraints(min_length=1, max_length=256)] | None = None
    title: Annotated[OneLine, StringConstraints(min_length=1, max_length=256)] | None = None
    link: Annotated[OneLine, StringConstraints(min_length=1, max_length=2048)] | None = None


ShortText = Annotated[str, StringConstraints(max_length=2000)]


class AgentIn(BaseModel):
    """``POST /v1/projects/{project_id}/agents``."""

    model_config = Strict
    name: Name
    transport: InboxTransportIn | WebhookTransportIn = Field(discriminator="kind")
    bound_source: BoundSourceIn | None = None
    program: Annotated[OneLine, StringConstraints(max_length=200)] | None = None
    model: Annotated[OneLine, StringConstraints(max_length=200)] | None = None
    description: ShortText | None = None


class PresenceIn(BaseModel):
    """``PUT /v1/agents/me/presence``."""

    model_config = Strict
    state: Presence


class ResourceNoticeIn(BaseModel):
    """A typed release or cancellation; combinations are checked by the service."""

    model_config = Strict
    resource_id: str
    phase_id: str
    state: str
    next_action: str


class SendFields(BaseModel):
    """Fields shared by a send and a reply."""

    model_config = Strict
    subject: Annotated[OneLine, StringConstraints(min_length=1, max_length=SUBJECT_MAX)] | None = None
    body_md: str | None = None
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = None
    importance: Importance | None = None
    ack_required: bool | None = None
    delivery_policy: DeliveryPolicy = DeliveryPolicy.CHECKED
    notification_policy: NotificationPolicy | None = None
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=IDEMPOTENCY_KEY_MAX)] | None = None
    project_key: str | None = None
    sender_name: str | None = None
    summary: str | None = None

    @field_validator("summary")
    @classmethod
    def _truncate(cls, value: str | None) -> str | None:
        return value[:SUMMARY_MAX] if value is not None else None


class SendIn(SendFields):
    """``POST /v1/messages``."""

    to: Annotated[list[Recipient], Field(min_length=1, max_length=RECIPIENTS_MAX)]
    cc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX)] = []
    bcc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX)] = []
    thread_id: Annotated[str, StringConstraints(pattern=THREAD_RE.pattern)] | None = None
    resource_notice: ResourceNoticeIn | None = None

    @model_validator(mode="after")
    def _recipient_total(self) -> SendIn:
        if len(self.to) + len(self.cc) + len(self.bcc) > RECIPIENTS_MAX:
            raise ValueError(f"to, cc and bcc hold at most {RECIPIENTS_MAX} recipients in all")
        return self


class ReplyIn(SendFields):
    """``POST /v1/messages/{id}/reply``: body required, the rest inherited."""

    body_md: str


class InboxQuery(BaseModel):
    """Query of ``GET /v1/agents/me/inbox``."""

    model_config = ConfigDict(extra="forbid")
    cursor: str | None = None
    limit: Annotated[int, Field(ge=1, le=INBOX_LIMIT_MAX)] = 50
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = None
    unread_only: bool = False
    urgent_only: bool = False


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a dotted field name (``to.2``)."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"
