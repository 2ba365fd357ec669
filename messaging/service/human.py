"""The project's human: writes to agents as ``human`` and reads the human inbox.

The human is a record in the project's agents hash without a ref or token
(written when the project is created), so resolution, delivery and replies
treat it like any recipient: its mail goes to its own inbox, which the
project token reads.
"""

from __future__ import annotations

from messaging.config import Settings
from messaging.errors import invalid
from messaging.models import HUMAN, InboxQuery, NotificationPolicy, SendIn
from messaging.service import sending
from messaging.service.caller import Caller, CallerKind
from messaging.service.reading import inbox_of
from messaging.store.schema import AgentField
from messaging.store.store import Store
from messaging.timefmt import now_us
from messaging.types import Json

DESCRIPTION = "the project's human (the console)"


def human_record(project_id: str, at_us: int) -> Json:
    """The human's record: an active inbox recipient with no ref, token or parent."""
    return {
        AgentField.ID: HUMAN, AgentField.PROJECT_ID: project_id, AgentField.NAME: HUMAN,
        AgentField.REF: "", AgentField.STATUS: "active", AgentField.PRESENCE: None,
        AgentField.LAST_ACTIVE_US: str(at_us), AgentField.USED_US: str(at_us),
        AgentField.REGISTERED_US: str(at_us), AgentField.TRANSPORT: {"kind": "inbox"},
        AgentField.BOUND_SOURCE: None, AgentField.PARENT: None, AgentField.ROOT: HUMAN,
        AgentField.INBOUND: "open", AgentField.PROGRAM: None, AgentField.MODEL: None,
        AgentField.DESCRIPTION: DESCRIPTION,
    }


async def ensure_human(store: Store, project_id: str) -> None:
    """Write the project's human record if it has none (projects made before it)."""
    await store.add_agent_record(project_id, human_record(project_id, now_us()))


async def send_as_human(store: Store, settings: Settings, dispatcher: sending.DeliveryPublisher,
                        caller: Caller, project_id: str, body: SendIn) -> sending.SendAnswer:
    """Send as ``human`` with the project token; always ``wake``.

    Raises:
        CourierError: FORBIDDEN for another token; the send's own rejections.
    """
    caller.require_project(project_id)
    if body.resource_notice is not None or body.probe:
        raise invalid("resource_notice" if body.resource_notice else "probe",
                      "the human sends messages only")
    if body.notification_policy is NotificationPolicy.QUIET:
        raise invalid("notification_policy", "the human's mail always wakes its recipients")
    await ensure_human(store, project_id)
    body = body.model_copy(update={"notification_policy": NotificationPolicy.WAKE})
    as_human = Caller(CallerKind.AGENT, project_id, HUMAN)
    return await sending.send(store, settings, dispatcher, as_human, body)


async def human_inbox(store: Store, caller: Caller, project_id: str, q: InboxQuery, *,
                      shown: bool = False) -> Json:
    """A page of the human inbox, oldest first, with the agents' inbox cursor rules."""
    caller.require_project(project_id)
    return await inbox_of(store, caller, project_id, HUMAN, q, shown=shown)
