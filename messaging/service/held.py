"""Held mail: what waits for the project's human, released or declined by them."""

from __future__ import annotations

from messaging import ids
from messaging.config import Settings
from messaging.errors import CourierError, not_found
from messaging.service.caller import Caller
from messaging.service.directory import require_project
from messaging.service.sending import DeliveryPublisher
from messaging.service.views import delivery_view, message_view
from messaging.store.store import Store
from messaging.timefmt import now_us
from messaging.types import Json

HELD_LIST_MAX = 500
DECLINED = "declined by the recipient's user"


async def list_held(store: Store, caller: Caller, project_id: str) -> Json:
    """The project's held deliveries, oldest first, each with its message."""
    caller.require_project(project_id)
    await require_project(store, project_id)
    dids = await store.held_ids(project_id, HELD_LIST_MAX)
    dlvs = [d for d in await store.get_deliveries(project_id, dids) if d]
    records = await store.get_messages(project_id, [d["message_id"] for d in dlvs])
    rows = [{**delivery_view(d), "message": message_view(r, full=True)}
            for d, r in zip(dlvs, records, strict=True) if r]
    return {"deliveries": rows}


async def settle(store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller,
                 delivery_id: str, mode: str) -> Json:
    """Release a held delivery (dispatched as usual) or decline it (``rejected``).

    Raises:
        CourierError: FORBIDDEN without the project's token; NOT_FOUND;
            DELIVERY_NOT_HELD when it is not (or no longer) held.
    """
    project_id = ids.project_of(delivery_id)
    if project_id is None:
        raise not_found("delivery")
    caller.require_project(project_id)
    (dlv,) = await store.get_deliveries(project_id, [delivery_id])
    if dlv is None:
        raise not_found("delivery")
    now = now_us()
    due_ms = now // 1000 + int(settings.outbox_grace_s * 1000)
    answer = await store.settle_held(project_id, dlv, mode, now, due_ms, DECLINED)
    if answer[0] == "not_held":
        raise CourierError("DELIVERY_NOT_HELD", "this delivery is not held (any more)",
                           {"delivery_id": delivery_id})
    if answer[0] == "released":
        dispatcher.submit(project_id, answer[1], delivery_id)
    (dlv,) = await store.get_deliveries(project_id, [delivery_id])
    if dlv is None:
        raise not_found("delivery")
    return delivery_view(dlv)
