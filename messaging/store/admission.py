"""The admission script's boundary: what a send asks of it, and what it answers.

``admit_message.lua`` runs one send: the idempotency check, the recipients'
resolution and, when all of it passes, every write. ``AdmitRequest`` names
what it is given (the script's ``ARGV[1]``, spelled by ``Store.admit``);
``Admission`` is its answer, decoded, with the message's JSON as stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from messaging.store.schema import with_sender
from messaging.types import Json


@dataclass(frozen=True)
class RateCharge:
    """One request charged to a rate bucket that every API process shares
    (``take_request.lua``): a bucket fills by one request every ``interval_us``
    and holds ``burst_us`` worth of them."""

    bucket: str
    interval_us: int
    burst_us: int


@dataclass(frozen=True)
class AdmitRequest:
    """One send for the admission script (``admit_message.lua``'s ``ARGV``)."""

    project_id: str
    sender_id: str
    message_id: str
    thread_id: str
    # The message's JSON without its sender fields (``schema.without_sender``, packed):
    # the script writes them first, from what it resolves.
    message_json: str
    recipients: list[str]
    delivery_ids: list[str]
    now_us: int
    # When the sweeper republishes a delivery no worker has taken.
    due_ms: int
    # "wake", "quiet" or "auto" (the default rule); quiet_invalid: the send asked for
    # quiet where its importance refuses it.
    policy: str
    quiet_invalid: bool
    has_bcc: bool
    operation: str = "send"
    idempotency_key: str | None = None
    # The request's fingerprint: "" without an idempotency key.
    fingerprint: str = ""
    # Transports whose deliveries join their ready sets in the script.
    ready_kinds: tuple[str, ...] = ()

    def script_args(self, idem_ttl_s: int, rate: RateCharge | None) -> Json:
        """The script's ``ARGV[1]`` object."""
        args: Json = {
            "sender_id": self.sender_id, "now_us": str(self.now_us),
            "due_ms": str(self.due_ms), "idem_fp": self.fingerprint,
            "idem_ttl_s": idem_ttl_s, "thread_id": self.thread_id,
            "message_id": self.message_id, "policy": self.policy,
            "quiet_invalid": self.quiet_invalid,
            "recipients": [{"s": r} for r in self.recipients],
            "delivery_ids": self.delivery_ids, "has_bcc": self.has_bcc,
            "ready_kinds": list(self.ready_kinds),
        }
        if rate is not None:
            args["rate"] = [rate.interval_us, rate.burst_us]
        return args


@dataclass(frozen=True)
class Admission:
    """The admission script's answer.

    ``status`` is one of ``ok`` (admitted), ``replay`` (the idempotency key's
    send, admitted before), ``conflict``, ``quiet_not_allowed``,
    ``sender_gone``, ``recipients`` (some cannot take mail: ``failures``) and
    ``rate_limited`` (the request's rate bucket was empty: nothing was done,
    ``rate_wait_us`` until it has room).
    """

    status: str
    answer: Json
    # ok: the message's JSON as stored, its sender fields first.
    message_json: str = ""
    rate_wait_us: int = 0
    failures: list[Json] = field(default_factory=list)

    @classmethod
    def decoded(cls, answer: Json, packed: str) -> Admission:
        """The admission of the script's decoded ``answer`` to a send of ``packed``."""
        status = str(answer["status"])
        if status == "ok":
            return cls(status, answer, message_json=with_sender(answer["sender"], packed))
        if status == "rate_limited":
            return cls(status, answer, rate_wait_us=int(answer["wait_us"]))
        return cls(status, answer, failures=list(answer.get("failures") or []))

    @property
    def observations(self) -> list[Any]:
        """What the script saw of each recipient (ok and replay)."""
        found: list[Any] = self.answer["observations"]
        return found

