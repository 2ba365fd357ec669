"""The inbox transport: the recipient's inbox in Courier's own store."""

from __future__ import annotations

from messaging.config import get_settings
from messaging.store.deliveries import DeliveryStore, Leased


class InboxTransport:
    """Puts a delivery in the recipient's inbox, once per delivery id."""

    kind = "inbox"
    # The delivery id is the inbox member: a second put changes nothing.
    idempotent = True

    def __init__(self) -> None:
        self.lease_s = get_settings().inbox_lease_s

    def deliver(self, store: DeliveryStore, project_id: str, leased: list[Leased]) -> None:
        """Put and record in one atomic step: the store is the provider."""
        store.deliver_inbox(project_id, leased)
