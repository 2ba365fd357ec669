"""The contract every transport keeps."""

from __future__ import annotations

from typing import Protocol

from messaging.store.deliveries import DeliveryStore, Leased


class Transport(Protocol):
    """Carries leased deliveries to recipients and records each outcome.

    ``idempotent`` says whether the receiving side drops a second copy of the
    same delivery id by itself: only then may a delivery whose worker died be
    finished by another worker.
    """

    kind: str
    idempotent: bool
    lease_s: float

    def deliver(self, store: DeliveryStore, project_id: str, leased: list[Leased]) -> None:
        """Deliver and record outcomes under each lease's fencing token."""
        ...
