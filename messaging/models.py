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
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from messaging import lookalikes

NAME_MAX = 64
RECIPIENTS_MAX = 100
# Characters of one recipient string; a longer one reaches no agent (RECIPIENT_NOT_FOUND).
RECIPIENT_MAX = 300
SUBJECT_MAX = 200
SUMMARY_MAX = 200
IDEMPOTENCY_KEY_MAX = 255
INBOX_LIMIT_MAX = 500
BODY_CUT_MAX_CHARS = 1_000_000
THREAD_LIMIT_DEFAULT = 50
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
# C0 and C1 control characters and DEL (Unicode's category Cc): a host may type a
# single-line text into a terminal or put it in an environment, where ESC, NUL,
# Ctrl-U or a C1 CSI would act rather than be read.
CONTROLS_RE = re.compile("[\x00-\x1f\x7f-\x9f]")


def _one_line(value: str) -> str:
    """A single-line text: no line break, no C0 or C1 control character, no DEL."""
    if any(ch in LINE_BREAKS for ch in value):
        raise ValueError("must be one line")
    control = CONTROLS_RE.search(value)
    if control is not None:
        raise ValueError("must not contain control characters "
                         f"(U+{ord(control.group()):04X}: C0, C1 and DEL are refused)")
    return value


def without_controls(value: str) -> str:
    """``value`` without its control characters (text stored before they were refused)."""
    return CONTROLS_RE.sub("", value)


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
# The sender of Courier's own notices (idle notices): no agent, no token.
NOTICE_SENDER = "courier"
RESERVED_NAMES = frozenset({"main", NOTICE_SENDER, "human"})
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
    """A recipient: ``Name``, ``Name [ref]`` or an agent id, one line, names NFKC-normalized.

    Its length is the send's to judge (``RECIPIENT_MAX``): a longer or unknown
    recipient fails as a recipient, not as a shape."""
    _one_line(value)
    value = normal_name(value)
    if value.startswith("agt_"):
        return value
    match = LABEL_RE.match(value)
    check_name(match.group("name") if match else value)
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


def _integral(value: Any) -> Any:
    """A JSON number with no fractional part (``3.0``) as the integer it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# What the schema calls an integer, as JSON Schema counts it: 3 and 3.0, not 3.5
# (nor "3" or true, which strict models refuse). One rule on every face. Put it
# after an int's constraints (``Annotated[int, Field(le=...), Integral]``): before
# them, the schema would lose its minimum and maximum.
Integral = BeforeValidator(_integral)
# Every single-line text of a request: no line break, no C0/C1 control character or DEL.
# The schema says so with a pattern; the validator checks it, to name the character.
ONE_LINE_PATTERN = "^[^\u0000-\u001f\u007f-\u009f\u2028\u2029]*$"
OneLineSchema = Field(json_schema_extra={"pattern": ONE_LINE_PATTERN})
OneLine = Annotated[str, AfterValidator(_one_line), OneLineSchema]
Name = Annotated[
    str, StringConstraints(min_length=1, max_length=NAME_MAX), AfterValidator(check_agent_name)
]
Subject = Annotated[OneLine, StringConstraints(min_length=1, max_length=SUBJECT_MAX)]
IdempotencyKey = Annotated[
    OneLine, StringConstraints(min_length=1, max_length=IDEMPOTENCY_KEY_MAX)]
Recipient = Annotated[str, StringConstraints(min_length=1), AfterValidator(check_recipient),
                      OneLineSchema]


class ProjectIn(Model):
    """``POST /v1/projects``."""

    project_key: Annotated[str, StringConstraints(min_length=1, max_length=4096), OneLineSchema]
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

    kind: Annotated[OneLine, StringConstraints(min_length=1, max_length=64)]


class BoundSourceIn(Model):
    """The host conversation an agent is bound to."""

    kind: Annotated[OneLine, StringConstraints(min_length=1, max_length=64)]
    thread_id: Annotated[OneLine, StringConstraints(min_length=1, max_length=256)] | None = None
    title: Annotated[OneLine, StringConstraints(min_length=1, max_length=256)] | None = None
    link: Annotated[OneLine, StringConstraints(min_length=1, max_length=2048)] | None = None


ShortText = Annotated[str, StringConstraints(max_length=2000)]


class AgentIn(Model):
    """``POST /v1/projects/{project_id}/agents``."""

    name: Name
    transport: TransportIn
    bound_source: BoundSourceIn | None = None
    parent: Annotated[OneLine, StringConstraints(min_length=1, max_length=128)] | None = None
    inbound: Annotated[Inbound, ByValue] = Field(Inbound.OPEN, description=(
        "open (the default), or hold: mail from other agents waits for the project's human"))
    program: Annotated[OneLine, StringConstraints(max_length=200)] | None = None
    model: Annotated[OneLine, StringConstraints(max_length=200)] | None = None
    description: ShortText | None = None


class NameAllowIn(Model):
    """``PUT /v1/projects/{project_id}/names/{name}``."""

    ttl_s: Annotated[int, Field(ge=1, le=NAME_TTL_MAX_S), Integral] = Field(
        NAME_TTL_S, description=f"Seconds the authorization lasts (default {NAME_TTL_S}, at "
                                "most 7 days)")


class PresenceIn(Model):
    """``PUT /v1/agents/me/presence``."""

    state: Annotated[Presence, ByValue, Field(description=(
        "What your host is doing: busy, idle (finished its turn; sends the idle notices "
        "others wait for), exited (mail waits for a resume) or source_lost"))]


class HostEventKind(StrEnum):
    """What a recipient's host did with a delivery, besides showing it."""

    PUSHED = "pushed"  # put into the session by the host's own channel (not yet shown)
    RESUME_STARTED = "resume_started"  # an exited session is being resumed for it
    RESUME_ENDED = "resume_ended"  # the resumed session's turn ended
    RESUME_FAILED = "resume_failed"  # the session could not be resumed


HOST_EVENT_DETAIL_MAX = 200


class HostEventIn(Model):
    """``POST /v1/deliveries/{delivery_id}/host-events``."""

    kind: Annotated[HostEventKind, ByValue, Field(description=(
        "pushed (the host's channel put it into the session: not proof that the session "
        "shows it), resume_started, resume_ended or resume_failed"))]
    detail: Annotated[OneLine, StringConstraints(min_length=1,
                                                 max_length=HOST_EVENT_DETAIL_MAX)] | None = (
        Field(None, description=f"One line, at most {HOST_EVENT_DETAIL_MAX} characters: "
                                "what the host can say of it (an exit status, a session id)"))


# The notice's limits are published here but checked by the service, so that a
# wrong value is RESOURCE_NOTICE_INVALID like every other notice error.
NOTICE_ID_HELP = "1-96 ASCII characters: a letter or digit, then letters, digits and _.:-"


class ResourceNoticeIn(Model):
    """A typed release or cancellation; combinations are checked by the service."""

    resource_id: str = Field(description=f"The shared resource, opaque: {NOTICE_ID_HELP}",
                             json_schema_extra={"pattern": NOTICE_ID_RE.pattern})
    phase_id: str = Field(description=f"The finite phase the claim is about: {NOTICE_ID_HELP}",
                          json_schema_extra={"pattern": NOTICE_ID_RE.pattern})
    state: str = Field(
        description="What the sender reports: released (it let the resource go) or cancelled "
                    "(it dropped its dependency on it). A claim, not permission to proceed",
        json_schema_extra={"enum": ["released", "cancelled"]})
    next_action: str = Field(
        description="What the recipient is asked to do: none (delivered quiet), "
                    "retry_admission (with released only) or drop_dependency (with cancelled "
                    "only); an action wakes the recipient. Ask it only of a recipient that "
                    "depends on the resource",
        json_schema_extra={"enum": ["none", "retry_admission", "drop_dependency"]})


def _truncated(value: str) -> str:
    return value[:SUMMARY_MAX]


# A label for the sender's own records: cut rather than refused.
Summary = Annotated[OneLine, AfterValidator(_truncated)]
SUMMARY_HELP = ("A 5-10 word label for your own records, never delivered to anyone; cut to "
                f"{SUMMARY_MAX} characters rather than refused")


class SendFields(Model):
    """Fields shared by a send and a reply."""

    subject: Subject | None = Field(None, description=(
        "One line, 1-200 characters. The recipient's human previews only this line: make it a "
        "self-contained sentence saying what the message is about and whether it asks for "
        "work, not a greeting. Required unless resource_notice is given"))
    body_md: str | None = Field(None, description=(
        "The message in Markdown, stored byte for byte (at most the server's body limit). "
        "Open with the action, decision or result; keep logs and details in linked records"))
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = Field(
        None, description="A label of 1-64 letters, digits, _ or - that inbox and search "
                          "filter on")
    importance: Annotated[Importance, ByValue] | None = Field(
        None, description="low, normal (the default), high or urgent")
    ack_required: bool | None = Field(
        None, description="Ask the recipients to acknowledge the message (default false)")
    delivery_policy: Annotated[DeliveryPolicy, ByValue] = Field(
        DeliveryPolicy.CHECKED, description=(
            "checked (the default) or durable: both check recipients, store and deliver the "
            "same way today; neither skips a check or promises more"))
    notification_policy: Annotated[NotificationPolicy, ByValue] | None = Field(
        None, description=(
            "wake lets the delivery wake the recipient's host; quiet stores it for inbox and "
            "search only (refused with high or urgent importance or ack_required). Omitted: "
            "quiet only for low or normal mail without ack_required or probe whose recipients "
            "are all bound to a t3 source with a thread, wake otherwise. Set wake for "
            "handoffs, requested results and blockers"))
    idempotency_key: IdempotencyKey | None = Field(None, description=(
        "1-255 characters. The same key with the same request (within 7 days) answers the "
        "stored result again with idempotent_replay true and sends nothing; with another "
        "request it is 409 IDEMPOTENCY_KEY_CONFLICT. Without a key a retry sends another "
        "message: after a timeout, retry with the same key"))
    project_key: OneLine | None = Field(None, description=(
        "Optional check: your project's key; one that is not your token's is 403 "
        "SENDER_MISMATCH"))
    sender_name: Annotated[OneLine, AfterValidator(normal_name)] | None = Field(None, description=(
        "Optional check: your agent name; one that is not your token's is 403 "
        "SENDER_MISMATCH"))
    summary: Summary | None = Field(None, description=SUMMARY_HELP)
    probe: bool = Field(False, description=(
        "A liveness ping (default false): the message checks that the recipient is reachable; "
        "an omitted notification_policy is then wake"))


RECIPIENT_FORMS = (
    "each an agent name, `Name [ref]` (that agent exactly, as a listing, an error or a "
    "message's `from` shows it), an agent id, or `main` (the root of your parent chain)")
CC_HELP = "Copied recipients, in the same forms as to; every recipient sees them (default none)"
BCC_HELP = ("Blind copies, in the same forms as to; the other recipients do not see them "
            "(default none)")
ThreadId = Annotated[str, StringConstraints(pattern=THREAD_RE.pattern)]
THREAD_HELP = ("A thread to post in (1-128 letters, digits and ._-); omitted, the message "
               "starts a thread whose id is its own id")
NOTICE_HELP = (
    "Instead of subject and body_md: a typed release or dependency cancellation of a shared "
    "resource, whose text Courier writes as the sender's claim. Exactly one recipient and an "
    "idempotency_key; no cc, bcc, subject, body_md, importance, ack_required, "
    "notification_policy, delivery_policy, topic, summary or probe")
SEND_RULE = (
    "A message needs a subject, unless it is a resource notice (`resource_notice`, whose "
    "subject and body Courier writes); the server refuses a send with neither "
    "(422 INVALID_ARGUMENT naming `subject`).")


class SendIn(SendFields):
    """``POST /v1/messages``."""

    model_config = ConfigDict(**StrictConfig, json_schema_extra={
        "description": "A message to send. " + SEND_RULE})

    to: Annotated[list[Recipient], Field(min_length=1, max_length=RECIPIENTS_MAX)] = Field(
        description=f"Recipients, 1-{RECIPIENTS_MAX} with cc and bcc: {RECIPIENT_FORMS}. To "
                    "answer a message, copy its `from` here (or use the reply call)")
    cc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX)] = Field(
        [], description=CC_HELP)
    bcc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX)] = Field(
        [], description=BCC_HELP)
    thread_id: ThreadId | None = Field(None, description=THREAD_HELP)
    resource_notice: ResourceNoticeIn | None = Field(None, description=NOTICE_HELP)

    @field_validator("cc", "bcc")
    @classmethod
    def _recipient_total(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # Checked on the list that goes over the limit, so the error names a field.
        cc = info.data.get("cc", []) if info.field_name == "bcc" else []
        if len(info.data.get("to", [])) + len(cc) + len(value) > RECIPIENTS_MAX:
            raise ValueError(f"to, cc and bcc hold at most {RECIPIENTS_MAX} recipients in all")
        return value

    @model_validator(mode="after")
    def _subject_or_notice(self) -> SendIn:
        # In the model rather than the schema, so generated clients keep one typed body;
        # raised with its location, so the error names ``subject`` like any field's.
        if self.subject is None and self.resource_notice is None:
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("missing", "required unless resource_notice is given"),
                loc=("subject",), input=None)])
        return self


class ReplyIn(SendFields):
    """``POST /v1/messages/{id}/reply``: body required, the rest inherited."""

    body_md: str = Field(description=(
        "The reply in Markdown, stored byte for byte. Its first line is what the recipient's "
        "human previews: open with the answer"))


class SubscriptionMessageIn(SendFields):
    """The message a subscription sends its target now: send fields without ``to``."""

    cc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX - 1)] = Field(
        [], description=CC_HELP)
    bcc: Annotated[list[Recipient], Field(max_length=RECIPIENTS_MAX - 1)] = Field(
        [], description=BCC_HELP)
    thread_id: ThreadId | None = Field(None, description=THREAD_HELP)
    resource_notice: ResourceNoticeIn | None = Field(None, description=NOTICE_HELP)

    @field_validator("bcc")
    @classmethod
    def _recipient_total(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if 1 + len(info.data.get("cc", [])) + len(value) > RECIPIENTS_MAX:
            raise ValueError(f"the target, cc and bcc hold at most {RECIPIENTS_MAX} in all")
        return value


class SubscriptionIn(Model):
    """``POST /v1/subscriptions``: one notice when the target next goes idle or exits."""

    target: Recipient = Field(description=(
        "The agent to hear about: its name, `Name [ref]` or agent id"))
    kind: Literal["idle"] = Field("idle", description=(
        "What to wait for: idle (the only kind, and the default)"))
    message: SubscriptionMessageIn | None = Field(None, description=(
        "Send fields without to: a message sent to the target now; the notice then waits for "
        "its next idle or exit after that. Omitted: a pure subscription that costs the target "
        "nothing"))
    ttl_s: Annotated[int, Field(ge=1, le=SUBSCRIPTION_TTL_MAX_S), Integral] = Field(
        SUBSCRIPTION_TTL_S, description=(
            "Seconds to wait (default 3600, at most 7 days); then one expired notice instead"))


CURSOR_HELP = "The next_cursor of the previous page, to continue from there"
PageLimit = Annotated[int, Field(ge=1, le=INBOX_LIMIT_MAX), Integral]
LIMIT_HELP = f"Messages per page, 1-{INBOX_LIMIT_MAX} (default 50)"


class InboxQuery(BaseModel):
    """What a page of an inbox holds (``GET /v1/agents/me/inbox``, MCP ``fetch_inbox``)."""

    model_config = ConfigDict(extra="forbid")
    cursor: str | None = Field(None, description=CURSOR_HELP)
    limit: PageLimit = Field(50, description=LIMIT_HELP)
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = Field(
        None, description="Only messages with this topic")
    unread_only: bool = Field(False, description="Only messages not yet marked read")
    urgent_only: bool = Field(False, description="Only urgent messages")
    wake_only: bool = Field(False, description=(
        "Only wake messages: quiet ones are neither returned nor marked observed"))
    unobserved_only: bool = Field(False, description=(
        "Only messages whose delivery was not observed yet (nothing showed them to the "
        "agent's conversation)"))
    body_max_chars: Annotated[int, Field(ge=1, le=BODY_CUT_MAX_CHARS), Integral] | None = (
        Field(None, description=(
            "Cut each body_md to this many characters; a cut item says `body_cut: true` "
            "and `body_chars`, the whole body's length (read it whole with "
            "GET /v1/messages/{id})")))


class InboxRead(InboxQuery):
    """Query of ``GET /v1/agents/me/inbox``: the page, and whether the reader shows it."""

    shown: bool = Field(True, description=(
        "Whether the caller shows these messages to the agent: true (the default: the "
        "agent reading its own inbox) records delivery_observed for each one returned; "
        "false for a reader that does not put what it reads into the agent's "
        "conversation (a person at the CLI, a hook that records what it shows itself, a "
        "script), which observes nothing"))


class ThreadQuery(BaseModel):
    """Query of ``GET /v1/threads/{thread_id}`` (and its rendered form)."""

    model_config = ConfigDict(extra="forbid")
    cursor: str | None = Field(None, description=CURSOR_HELP)
    limit: PageLimit = Field(THREAD_LIMIT_DEFAULT, description=LIMIT_HELP)


class SearchQuery(BaseModel):
    """Query of ``GET /v1/agents/me/search`` (and the project's search)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    q: Annotated[str, StringConstraints(max_length=SEARCH_Q_MAX)] = Field("", description=(
        "Words that must all appear in the subject or body; `auth*` matches a prefix"))
    topic: Annotated[str, StringConstraints(pattern=TOPIC_RE.pattern)] | None = Field(
        None, description="Only messages with this topic")
    sender: Annotated[OneLine, StringConstraints(min_length=1, max_length=NAME_MAX),
                      AfterValidator(normal_name)] | None = Field(
        None, alias="from", description="Only messages from the sender of this name")
    since: AwareDatetime | None = Field(
        None, description="Only messages sent at or after this time (RFC 3339, with a zone)")
    until: AwareDatetime | None = Field(
        None, description="Only messages sent at or before this time (RFC 3339, with a zone)")
    cursor: str | None = Field(None, description=CURSOR_HELP)
    limit: PageLimit = Field(50, description=LIMIT_HELP)


class LaneIn(Model):
    """``PUT /v1/projects/{project_id}/lane``."""

    lane: Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=r"^[a-z0-9-]+$")]
