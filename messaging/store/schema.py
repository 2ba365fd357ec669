"""The fields of Courier's stored records, named once.

The Lua scripts (their headers point here) and the Python views follow these
names. Times end in ``_us`` (microseconds, decimal strings) or ``_ms``.

Agent (JSON in the project's ``agents`` hash, by agent id): ``AgentField``.
Message (hash ``msg:<id>``): ``MessageField``; its ``json`` is the message as
sent, immutable.
Delivery (hash ``dlv:<id>``): ``DeliveryField``; one per message x recipient.
"""

from __future__ import annotations

from enum import StrEnum


class AgentField(StrEnum):
    """An agent's JSON record."""

    ID = "id"
    PROJECT_ID = "project_id"
    NAME = "name"
    REF = "ref"  # 6 hex digits, unique in the project
    STATUS = "status"  # active | retired | closed
    PRESENCE = "presence"  # busy | idle | exited | source_lost | null (unknown)
    LAST_ACTIVE_US = "last_active_us"  # any sign of life (shown in the agent list)
    USED_US = "used_us"  # registration, busy/idle reports, sends: what resolution ranks
    REGISTERED_US = "registered_us"
    TRANSPORT = "transport"  # {"kind", ...settings}
    BOUND_SOURCE = "bound_source"  # {"kind", "thread_id"?, ...} or null
    PARENT = "parent"  # agent id of the session it works for, or null
    ROOT = "root"  # the root of its parent chain (itself without a parent)
    INBOUND = "inbound"  # open | hold (models.Inbound)
    ENDPOINT = "endpoint"  # a webhook endpoint's health
    PROGRAM = "program"
    MODEL = "model"
    DESCRIPTION = "description"


class MessageField(StrEnum):
    """A message hash."""

    JSON = "json"  # the message as sent, stored byte for byte
    CREATED_US = "created_us"
    SEQ = "seq"
    POLICY = "policy"  # wake | quiet
    DELIVERIES = "deliveries"  # JSON [[delivery id, agent id ("" while pending)], ...]
    RESOLVED = "resolved"  # JSON {recipient string: agent id}, only with bcc
    WITHHELD = "withheld"  # JSON [agent id, ...]: recipients it is held from (or declined)
    OBSERVATIONS = "observations"  # JSON, notices only: what admission observed


class DeliveryField(StrEnum):
    """A delivery hash."""

    ID = "id"
    MESSAGE_ID = "message_id"
    AGENT_ID = "agent_id"  # "" while the target is pending
    SENDER_ID = "sender_id"  # an agent id, or "courier" for notices
    RECIPIENT = "recipient"  # "Name [ref]", or the bare name while pending
    TRANSPORT = "transport"  # "" while pending
    POLICY = "policy"
    STAGE = "stage"  # admitted | target_selected | dispatch_started | ...
    TARGET = "target"  # pinned | pending
    HELD = "held"  # "1" while held for the recipient's user
    DECLINED = "declined"  # "1": the recipient's user declined it (never shown)
    OUTCOME = "outcome"  # accepted | rejected | failed | unknown
    ERROR = "error"  # why it ended without an attempt (expired name, declined)
    FENCE = "fence"
    LEASE_UNTIL_MS = "lease_until_ms"
    RETRY_AT_MS = "retry_at_ms"
    ATTEMPTS = "attempts"  # JSON [{n, started_us, ended_us?, outcome?, error?}]
    REDRIVE = "redrive"
    # How often the sweeper published it again without a lease since (its grace doubles).
    SWEEPS = "sweeps"
    # "1": the recipient's side showed it (an inbox put is visible at once) before
    # the outcome was recorded; recording `accepted` then records the observation.
    SEEN_EARLY = "seen_early"
    ROUND_BASE = "round_base"
    READ_US = "read_us"
    ACK_US = "ack_us"


class Target(StrEnum):
    """Whether a delivery's recipient agent is chosen yet."""

    PINNED = "pinned"
    PENDING = "pending"  # an authorized name no agent has registered yet
