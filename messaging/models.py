"""Request models of the HTTP contract (docs/http-api.md); no extra fields, strict types."""

from __future__ import annotations

import re
import unicodedata
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from messaging import lookalikes

NAME_MAX = 64
RECIPIENTS_MAX = 100
SUBJECT_MAX = 200
SUMMARY_MAX = 200
IDEMPOTENCY_KEY_MAX = 255
INBOX_LIMIT_MAX = 500
SEARCH_Q_MAX = 500
SUBSCRIPTION_TTL_S = 3600
SUBSCRIPTION_TTL_MAX_S = 7 * 24 * 3600
NAME_TTL_S = 3600
NAME_TTL_MAX_S = 7 * 24 * 3600

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


class Inbound(StrEnum):
    """What happens to mail from other agents."""

    OPEN = "open"
    HOLD = "hold"  # waits for the project's human to release or decline it


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


# Every character str.splitlines() breaks a line on.
LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _one_line(value: str) -> str:
    if any(ch in LINE_BREAKS for ch in value):
        raise ValueError("must be one line")
    return value


def normal_name(value: str) -> str:
    """A name as Courier stores and compares it: NFKC (``Ａlice`` is ``Alice``)."""
    return unicodedata.normalize("NFKC", value)


def check_name(value: str) -> str:
    """A name's form: one line, no brackets, no control, bidi or format characters,
    no outer spaces."""
    _one_line(value)
    _visible_text(value)
    _no_format_characters(value)
    if "[" in value or "]" in value:
        raise ValueError("must not contain [ or ]")
    if value != value.strip():
        raise ValueError("must not start or end with white space")
    return value


# Bidirectional-override, embedding, isolate and mark characters: they make a
# name read differently from what it is.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")
RESERVED_NAMES = frozenset({"main", "courier", "human"})
# The project's human: its id and name in the agents hash, a sender and a recipient.
HUMAN = "human"
AGENT_ID_PREFIX = "agt_"


def _visible_text(value: str) -> str:
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            raise ValueError(f"must not contain control characters (U+{ord(ch):04X})")
        if ch in BIDI_CONTROLS:
            raise ValueError(f"must not contain bidirectional controls (U+{ord(ch):04X})")
    return value


def _no_format_characters(value: str) -> str:
    # Zero-width and other format characters (Cf) make two names look the same.
    for ch in value:
        if unicodedata.category(ch) == "Cf":
            raise ValueError(f"must not contain invisible format characters (U+{ord(ch):04X})")
    return value


def check_agent_name(value: str) -> str:
    """A name an agent may take, NFKC-normalized: a valid name, not reserved nor one
    that reads as a reserved name, not like an agent id."""
    value = normal_name(value)
    if not 1 <= len(value) <= NAME_MAX:
        raise ValueError(f"must be 1-{NAME_MAX} characters")
    check_name(value)
    if value.startswith(AGENT_ID_PREFIX):
        raise ValueError(f"must not start with {AGENT_ID_PREFIX} (agent ids do)")
    reserved = ", ".join(sorted(RESERVED_NAMES))
    if value.lower() in RESERVED_NAMES:
        raise ValueError(f"{value} is reserved ({reserved})")
    like = lookalikes.reads_as(value, sorted(RESERVED_NAMES))
    if like is not None:
        raise ValueError(f"reads as the reserved name {like} ({reserved})")
    return value


def check_recipient(value: str) -> str:
    """A recipient: ``Name``, ``Name [ref]`` or an agent id; names NFKC-normalized."""
    _one_line(value)
    value = normal_name(value)
    if value.startswith("agt_"):
        return value
    match = LABEL_RE.match(value)
    name = match.group("name") if match else value
    if len(name) > NAME_MAX:
        raise ValueError(f"names are at most {NAME_MAX} characters")
    check_name(name)
    return value


StrictConfig = ConfigDict(extra="forbid", strict=True)
# FastAPI validates the parsed JSON in Python mode, where a strict enum takes
# only enum instances: choices are matched by value, everything else stays strict.
ByValue = Strict(False)


def _no_surrogates(value: Any) -> Any:
    """Refuse text that UTF-8 cannot hold (JSON may escape lone surrogates)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    elif isinstance(value, list):
        for item in value:
            _no_surrogates(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_surrogates(key)
            _no_surrogates(item)
    return value


class Model(BaseModel):
    """A request model: no extra fields, strict types, text storable as UTF-8."""

    model_config = StrictConfig

    @field_validator("*")
    @classmethod
    def _utf8(cls, value: Any) -> Any:
        return _no_surrogates(value)


OneLine = Annotated[str, AfterValidator(_one_line)]
Name = Annotated[
    str, StringConstraints(min_length=1, max_length=NAME_MAX), AfterValidator(check_agent_name)
]
Subject = Annotated[OneLine, StringConstraints(min_length=1, max_length=SUBJECT_MAX)]
IdempotencyKey = Annotated[str, StringConstraints(min_length=1, max_length=IDEMPOTENCY_KEY_MAX)]
Recipient = Annotated[
    str, StringConstraints(min_length=1, max_length=NAME_MAX + 20), AfterValidator(check_recipient)
]


class ProjectIn(Model):
    """``POST /v1/projects``."""

    project_key: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    name: Annotated[OneLine, StringConstraints(min_length=1, max_length=200)] | None = None

    @field_validator("project_key")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path")
        return _one_line(value)


class TransportIn(Model):
    """``{"kind": ..., ...settings}``: the rest is checked by that transport's settings model
    (``{"kind": "inbox"}``; ``{"kind": "webhook", "url", "secret"?}``; installed plug-ins)."""

    model_config = ConfigDict(extra="allow", strict=True)

    kind: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class BoundSourceIn(Model):
    """The host conversation an agent is bound to."""

    kind: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    thread_id: Annotated[OneLine, StringConstraints(min_length=1, max_length=256)] | None = None
    title: Annotated[OneLine, StringConstraints(min_length=1, max_length=256)] | None = None
    link: Annotated[OneLine, StringConstraints(min_length=1, max_length=2048)] | None = None


ShortText = Annotated[str, StringConstraints(max_length=2000)]


class AgentIn(Model):
    """``POST /v1/projects/{project_id}/agents``."""

    name: Name
    transport: TransportIn
    bound_source: BoundSourceIn | None = None
    parent: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    inbound: Annotated[Inbound, ByValue] = Inbound.OPEN
    program: Annotated[OneLine, StringConstraints(max_length=200)] | None = None
    model: Annotated[OneLine, StringConstraints(max_length=200)] | None = None
    description: ShortText | None = None


class NameAllowIn(Model):
    """``PUT /v1/projects/{project_id}/names/{name}``."""

    ttl_s: Annotated[int, Field(ge=1, le=NAME_TTL_MAX_S)] = NAME_TTL_S


class PresenceIn(Model):
    """``PUT /v1/agents/me/presence``."""

    state: Annotated[Presence, ByValue]


class ResourceNoticeIn(Model):
    """A typed release or cancellation; combinations are checked by the service."""

    resource_id: str
    phase_id: str
    state: str
    next_action: str


class SendFields(Model):
    """Fields shared by a send and a reply."""

    subject: Subject | None = None
    body_md: str | None = None
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = None
    importance: Annotated[Importance, ByValue] | None = None
    ack_required: bool | None = None
    delivery_policy: Annotated[DeliveryPolicy, ByValue] = DeliveryPolicy.CHECKED
    notification_policy: Annotated[NotificationPolicy, ByValue] | None = None
    idempotency_key: IdempotencyKey | None = None
    project_key: str | None = None
    sender_name: Annotated[str, AfterValidator(normal_name)] | None = None
    summary: str | None = None
    probe: bool = False

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

    @field_validator("cc", "bcc")
    @classmethod
    def _recipient_total(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # Checked on the list that goes over the limit, so the error names a field.
        cc = info.data.get("cc", []) if info.field_name == "bcc" else []
        if len(info.data.get("to", [])) + len(cc) + len(value) > RECIPIENTS_MAX:
            raise ValueError(f"to, cc and bcc hold at most {RECIPIENTS_MAX} recipients in all")
        return value


class ReplyIn(SendFields):
    """``POST /v1/messages/{id}/reply``: body required, the rest inherited."""

    body_md: str


class SubscriptionMessageIn(SendFields):
    """The message a subscription sends its target now: send fields without ``to``."""

    cc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX - 1)] = []
    bcc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX - 1)] = []
    thread_id: Annotated[str, StringConstraints(pattern=THREAD_RE.pattern)] | None = None
    resource_notice: ResourceNoticeIn | None = None

    @field_validator("bcc")
    @classmethod
    def _recipient_total(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if 1 + len(info.data.get("cc", [])) + len(value) > RECIPIENTS_MAX:
            raise ValueError(f"the target, cc and bcc hold at most {RECIPIENTS_MAX} in all")
        return value


class SubscriptionIn(Model):
    """``POST /v1/subscriptions``: one notice when the target next goes idle or exits."""

    target: Recipient
    kind: Literal["idle"] = "idle"
    message: SubscriptionMessageIn | None = None
    ttl_s: Annotated[int, Field(ge=1, le=SUBSCRIPTION_TTL_MAX_S)] = SUBSCRIPTION_TTL_S


class InboxQuery(BaseModel):
    """Query of ``GET /v1/agents/me/inbox``."""

    model_config = ConfigDict(extra="forbid")
    cursor: str | None = None
    limit: Annotated[int, Field(ge=1, le=INBOX_LIMIT_MAX)] = 50
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = None
    unread_only: bool = False
    urgent_only: bool = False


class SearchQuery(BaseModel):
    """Query of ``GET /v1/agents/me/search`` (and the project's search)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    q: Annotated[str, StringConstraints(max_length=SEARCH_Q_MAX)] = ""
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = None
    sender: Annotated[str, StringConstraints(min_length=1, max_length=NAME_MAX),
                      AfterValidator(normal_name)] | None = Field(
        None, alias="from")
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None
    cursor: str | None = None
    limit: Annotated[int, Field(ge=1, le=INBOX_LIMIT_MAX)] = 50


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a dotted field name (``to.2``)."""
    if loc[:1] == ("body",) and len(loc) > 1 and isinstance(loc[1], int):
        return "body"  # a JSON syntax error: loc holds its position, not a field
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def invalid_argument_details(errors: list[Any], prefix: str = "") -> tuple[str, dict[str, Any]]:
    """Pydantic errors as INVALID_ARGUMENT's message and details (first field named)."""
    rows = [
        {"field": prefix + field_path(tuple(e["loc"])), "message": e["msg"], "type": e["type"]}
        for e in errors
    ]
    first = rows[0] if rows else {"field": prefix.rstrip(".") or "body", "message": "invalid"}
    return f"{first['field']}: {first['message']}", {"field": first["field"], "errors": rows}


class LaneIn(Model):
    """``PUT /v1/projects/{project_id}/lane``."""

    lane: Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=r"^[a-z0-9-]+$")]
