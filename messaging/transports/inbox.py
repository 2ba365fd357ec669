"""The inbox transport: the recipient's inbox in Courier's own store."""

from __future__ import annotations

from typing import ClassVar

from messaging.config import Settings
from messaging.store.deliveries import DeliveryStore, Leased
from messaging.store.durability import Durability
from messaging.transports.base import Delivery, Outcome, OutcomeKind, Transport

LEASE_LOST = "the lease was lost before the inbox put: another worker owns this delivery"


class InboxTransport(Transport):
    """Puts a delivery in the recipient's inbox, once per delivery id."""

    kind: ClassVar[str] = "inbox"
    # Puts share one script and one store round trip.
    batch_size = 100
    # The delivery id is the inbox member: a second put changes nothing.
    idempotent = True
    wants_message = False

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._store: DeliveryStore | None = None

    @property
    def store(self) -> DeliveryStore:
        """The store is the provider (its own pool, made where it is used)."""
        if self._store is None:
            self._store = DeliveryStore.from_url(self.courier.store_url,
                                                 Durability.of(self.courier))
        return self._store

    def deliver(self, delivery: Delivery) -> Outcome:
        """Put one delivery in its recipient's inbox."""
        answer = self.deliver_all([delivery])[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def deliver_all(self, deliveries: list[Delivery]) -> list[Outcome | BaseException]:
        """Put them all in one script."""
        if not deliveries:
            return []
        for delivery in deliveries:
            delivery.hand_off()
        project_id = deliveries[0].project_id
        put = self.store.put_inbox(project_id, [_fenced(d) for d in deliveries])
        return [Outcome(OutcomeKind.ACCEPTED) if ok else RuntimeError(LEASE_LOST) for ok in put]


def _fenced(delivery: Delivery) -> Leased:
    """What the inbox put checks of a delivery: its id, recipient and fencing token."""
    return Leased(delivery.delivery_id, delivery.fence, str(delivery.recipient["id"]),
                  message_id="", sender_id="", attempt=delivery.attempt, round_attempt=0,
                  admitted_us=0)
