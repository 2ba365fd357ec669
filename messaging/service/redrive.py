"""Redrive: send a delivery again on its own route, with the same delivery id."""

from __future__ import annotations

from typing import Any

from messaging import ids
from messaging.errors import CourierError, not_found
from messaging.service.caller import Caller
from messaging.service.sending import DeliveryPublisher
from messaging.service.views import delivery_view
from messaging.store.store import Store
from messaging.timefmt import now_us

REFUSALS = {
    "accepted": "the transport accepted this delivery; it is not sent again",
    "held": "this delivery is held for its recipient's user: release it instead",
    "pending": "this delivery waits for the first agent of its name; it is sent when one "
               "registers",
    "in_flight": "an attempt or retry of this delivery is still under way",
}


async def redrive(store: Store, dispatcher: DeliveryPublisher, caller: Caller,
                  delivery_id: str) -> dict[str, Any]:
    """Queue a new attempt of a delivery whose outcome is not `accepted`.

    Raises:
        CourierError: FORBIDDEN without the project's token; NOT_FOUND;
            DELIVERY_NOT_REDRIVABLE when accepted, held, pending or still in flight.
    """
    project_id = ids.project_of(delivery_id)
    if project_id is None:
        raise not_found("delivery")
    caller.require_project(project_id)
    answer = await store.redrive(project_id, delivery_id, now_us() // 1000)
    if answer == "missing":
        raise not_found("delivery")
    if answer != "ok":
        raise CourierError("DELIVERY_NOT_REDRIVABLE", REFUSALS[answer],
                           {"delivery_id": delivery_id, "reason": answer})
    (dlv,) = await store.get_deliveries(project_id, [delivery_id])
    if dlv is None:
        raise not_found("delivery")
    dispatcher.submit(project_id, dlv["transport"], delivery_id)
    return delivery_view(dlv)
