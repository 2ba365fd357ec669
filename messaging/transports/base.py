"""The contract every transport keeps: a delivery in, an outcome out.

A transport declares what is its nature (its kind, the settings model an agent
registers with, its batch size, how many it carries at once, whether it is
idempotent by delivery id, whether it wants the message) and implements one
call, ``deliver``, on plain values. Leasing, recording, retry scheduling and
endpoint health are the worker's (``workers.dispatch``), the same for every
transport; queues, worker processes, prefetch, lease length and the retry
schedule are deployment policy per kind (``messaging.transports.policy``).

``deliver`` calls ``delivery.hand_off()`` just before anything leaves for the
receiver. What it raises before that is a failure known to be before hand-off
(``failed``, at once); what it raises after is ``unknown`` (or, for an
idempotent transport, a retry: a second copy changes nothing).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from messaging.config import Settings
from messaging.types import Json


class OutcomeKind(StrEnum):
    """What one attempt came to."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    # Known not to have reached the receiver and worth another attempt later,
    # on the same route (refused connection, 408, 429, 5xx).
    RETRY = "retry"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Outcome:
    """A transport's answer for one delivery."""

    kind: OutcomeKind
    error: str = ""
    # The recipient's side already showed it (records delivery_observed).
    displayed: bool = False

    @property
    def endpoint(self) -> str:
        """What the attempt says of the endpoint's health: "ok", "down" or "" (nothing)."""
        if self.kind in (OutcomeKind.ACCEPTED, OutcomeKind.REJECTED):
            return "ok"
        return "down" if self.kind == OutcomeKind.RETRY else ""


class TransportSettings(BaseModel):
    """Base of every transport's settings model (``kind`` is not part of it).

    Validators get Courier's ``Settings`` as ``info.context["settings"]``; they
    run at registration and again at dispatch.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class Delivery:
    """One leased delivery, as a transport sees it."""

    delivery_id: str  # the same on every attempt and redrive
    attempt: int  # this attempt's number, from 1
    project_id: str
    recipient: Json  # the agent as stored (id, name, ref, ...)
    settings: TransportSettings  # the recipient's, validated again at dispatch
    # The message as its recipient may see it, with delivery_id and
    # notification_policy; empty for transports that declare ``wants_message = False``.
    message: Json = field(default_factory=dict)
    # The worker's bookkeeping at hand-off (raises when the lease was lost).
    on_hand_off: Callable[[], None] | None = None
    # The lease's fencing token: what a transport writing to Courier's own
    # store checks, so a worker that lost the lease writes nothing.
    fence: int = 0
    handed_off: bool = False

    def hand_off(self) -> None:
        """Mark that the request is leaving: from now on a crash is uncertainty."""
        if self.on_hand_off is not None:
            self.on_hand_off()
        self.handed_off = True


class Transport(ABC):
    """A way to carry deliveries to recipients (see the module docstring)."""

    kind: ClassVar[str]
    settings_model: ClassVar[type[TransportSettings]] = TransportSettings
    # Deliveries per task: many for cheap local transports, 1 for slow requests.
    batch_size: ClassVar[int] = 1
    # The receiving side drops a second copy of a delivery id by itself: only
    # then may a delivery whose worker died be finished by another worker.
    idempotent: ClassVar[bool] = False
    wants_message: ClassVar[bool] = True
    # Deliveries of a batch carried at the same time, each on a thread of its
    # own with its own lease and hand-off mark: for transports whose call
    # mostly waits on a receiver. ``deliver`` must then be thread-safe.
    parallel: ClassVar[int] = 1

    def __init__(self, settings: Settings) -> None:
        self.courier = settings

    @abstractmethod
    def deliver(self, delivery: Delivery) -> Outcome:
        """Carry one delivery; call ``delivery.hand_off()`` before anything leaves."""

    def deliver_all(self, deliveries: list[Delivery]) -> list[Outcome | BaseException]:
        """Carry several deliveries; one's exception never stops the others.

        Transports with a cheaper way to carry many at once override this.
        """
        out: list[Outcome | BaseException] = []
        for delivery in deliveries:
            try:
                out.append(self.deliver(delivery))
            except Exception as e:  # judged per delivery by the worker
                out.append(e)
        return out
