"""The fields of Courier's stored records, named once.

The Lua scripts (their headers point here) and the Python views follow these
names. Times end in ``_us`` (microseconds, decimal strings) or ``_ms``.

Agent (JSON in the project's ``agents`` hash, by agent id): ``AgentField``.
Message (hash ``msg:<id>``): ``MessageField``; its ``json`` is the message as
sent, immutable.
Delivery (hash ``dlv:<id>``): ``DeliveryField``; one per message x recipient.
"""

from __future__ import annotations

import copy
from enum import StrEnum
from typing import Any

import orjson

from messaging import ids


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
    # The fence of the lease whose request was handed to the receiver (mark_handed_off).
    HANDED_OFF_FENCE = "handed_off_fence"
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
    # JSON [{kind, us, detail?}]: what the recipient's host said it did (record_host_event).
    HOST_EVENTS = "host_events"
    PUSHED_US = "pushed_us"  # when the recipient's host first pushed it into its session
    # When it reached each stage (the latest attempt's, for the dispatch stages).
    ADMITTED_US = "admitted_us"
    TARGET_SELECTED_US = "target_selected_us"
    DISPATCH_STARTED_US = "dispatch_started_us"
    PROVIDER_RESULT_RECORDED_US = "provider_result_recorded_us"
    DELIVERY_OBSERVED_US = "delivery_observed_us"


# The host events a delivery keeps, the newest (record_host_event.lua).
HOST_EVENTS_KEPT = 20


class Target(StrEnum):
    """Whether a delivery's recipient agent is chosen yet."""

    PINNED = "pinned"
    PENDING = "pending"  # an authorized name no agent has registered yet


# A stored message's JSON leaves out what follows from the rest: its project and
# thread when its id says them, and these fields at these values. Every message
# pays for what it stores as long as it is kept, and most carry the defaults.
MESSAGE_DEFAULTS: dict[str, Any] = {
    "revision": 1, "cc": [], "bcc": [], "topic": None, "importance": "normal",
    "ack_required": False, "delivery_policy": "checked", "resource_notice": None,
    "summary": None, "in_reply_to": None, "probe": False,
}
# Who a message is from, written by the admission script (``admit_message.lua``):
# ``from`` the address used (``Name [ref]``), ``sender_name`` its bare name,
# ``sender_id`` its agent; ``via`` and ``via_id`` the subagent that sent it under
# its root session's address (absent otherwise).
SENDER_FIELDS = ("from", "sender_name", "sender_id", "via", "via_id")
# The order of a message's fields when it is read back (others follow, as stored).
MESSAGE_ORDER = (
    "id", "project_id", "thread_id", "revision", "from", "sender_name", "sender_id", "via",
    "via_id", "sender_location",
    "to", "cc", "bcc", "subject", "body_md", "topic", "importance", "ack_required",
    "delivery_policy", "resource_notice", "summary", "in_reply_to", "probe",
)


def _is_default(field: str, value: Any) -> bool:
    default = MESSAGE_DEFAULTS[field]
    return value is None if default is None else (type(value) is type(default)
                                                  and value == default)


def pack_message(msg: dict[str, Any]) -> str:
    """A message's JSON as the store keeps it (compact UTF-8, defaults left out)."""
    mid = str(msg["id"])
    out = {k: v for k, v in msg.items()
           if not (k in MESSAGE_DEFAULTS and _is_default(k, v))
           and not (k == "thread_id" and v == mid)
           and not (k == "project_id" and v == ids.project_of(mid))}
    location = out.get("sender_location")
    if isinstance(location, dict) and location.get("bound_source", "") is None:
        out["sender_location"] = {k: v for k, v in location.items() if k != "bound_source"}
    return orjson.dumps(out).decode()


def without_sender(msg: dict[str, Any]) -> dict[str, Any]:
    """A message without its sender fields: what admission is given to store."""
    return {k: v for k, v in msg.items() if k not in SENDER_FIELDS}


def with_sender(sender_json: str, packed: str) -> str:
    """A packed message (``without_sender``) with its sender fields' JSON object put
    first, as the admission script stores it."""
    return f"{sender_json[:-1]},{packed[1:]}"


def senders(msg: dict[str, Any]) -> set[str]:
    """The agents that sent a message: its sender, and the subagent it came ``via``."""
    return {str(msg["sender_id"]), *([str(msg["via_id"])] if msg.get("via_id") else [])}


def unpack_message(raw: str | bytes) -> dict[str, Any]:
    """A stored message's JSON with every field, in ``MESSAGE_ORDER``."""
    stored: dict[str, Any] = orjson.loads(raw)
    mid = str(stored["id"])
    implied = {"project_id": ids.project_of(mid), "thread_id": mid}
    msg: dict[str, Any] = {}
    for k in MESSAGE_ORDER:
        if k in stored:
            msg[k] = stored[k]
        elif k in implied:
            msg[k] = implied[k]
        elif k in MESSAGE_DEFAULTS:
            msg[k] = copy.copy(MESSAGE_DEFAULTS[k])
    msg.update((k, v) for k, v in stored.items() if k not in msg)
    if "sender_name" not in msg and "from" in msg:
        # Stored before the sender's address was: ``from`` was the bare name.
        msg["sender_name"] = msg["from"]
    if isinstance(msg.get("sender_location"), dict):
        msg["sender_location"].setdefault("bound_source", None)
    return msg
