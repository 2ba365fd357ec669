"""Idle subscriptions: one notice, exactly once, when a target goes idle or exits.

A subscription waits on one exact agent (resolved and pinned when it is made).
It ends with one notice: ``idle`` or ``exited`` when a presence report changes
the target to that state, or ``expired`` when ``ttl_s`` runs out first (the
sweeper calls ``DeliveryStore.expire_subscriptions``). The notice is a message from ``courier``
in the subscriber's inbox, delivered like any other, and an ``idle_notice``
event on the subscriber's stream. Taking the subscription off the waiting list
and writing its notice happen in one Lua step (``store/lua/notice_lib.lua``),
so racing reports and the sweeper never send two.

Only a session's main conversation (an agent without a parent) subscribes. A
subscriber that holds peer mail has its notice held like peer mail: its user
sees it first (the answer's ``notice_to`` says ``your_user``). A subscription
without a message, or with one that has no text, costs the target nothing.
"""

from __future__ import annotations

import json
import secrets

from pydantic import ValidationError

from messaging import ids
from messaging.config import Settings
from messaging.errors import CourierError, from_validation, not_found, unauthenticated
from messaging.models import (
    NOTICE_SENDER,
    RECIPIENT_MAX,
    Inbound,
    SendIn,
    SubscriptionIn,
    SubscriptionMessageIn,
)
from messaging.service.caller import Caller
from messaging.service.sending import (
    REASON_CODES,
    DeliveryPublisher,
    SendAnswer,
    failure_text,
    resolvable,
    send,
)
from messaging.service.views import label
from messaging.store.live import Subscription
from messaging.store.schema import pack_message
from messaging.store.store import Store
from messaging.timefmt import now_us, rfc3339
from messaging.types import Json

SYSTEM_SENDER = NOTICE_SENDER  # the sender of idle notices: no agent, no token
NOTICE_STATES = ("idle", "exited", "expired")
MAIN_ONLY = "subscribe from the main conversation: a subagent's session subscribes, not it"


def new_subscription_id(project_id: str) -> str:
    """A fresh subscription id of the project: ``sub_`` + project digits + 16 random."""
    return f"sub_{project_id.removeprefix('prj_')}{secrets.token_hex(8)}"


def _notice_text(state: str, target: str, sub: Json) -> tuple[str, str]:
    """Subject and Markdown body of one possible notice."""
    sid, ttl = sub["id"], sub["ttl_s"]
    after = (f" after your message `{sub['message_id']}`" if sub["message_id"] else "")
    if state == "idle":
        subject = f"Idle notice: {target} is idle"
        first = f"**{target}** went idle{after}."
    elif state == "exited":
        subject = f"Idle notice: {target} exited"
        first = (f"**{target}** exited{after}: its host stopped it. Mail to it waits "
                 "until the host resumes it.")
    else:
        subject = f"Idle notice expired: {target} did not go idle within {ttl} s"
        first = f"**{target}** neither went idle nor exited within {ttl} s{after}."
    body = f"{first}\n\nThis is the one notice of subscription `{sid}` ({state}).\n"
    return subject, body


def _notice_json(state: str, sub: Json, project_key: str) -> str:
    """The notice message for one outcome, prepared now, stored when it is sent."""
    subject, body = _notice_text(state, sub["target"], sub)
    message = {
        "id": sub["notice_message_id"], "project_id": sub["project_id"],
        "thread_id": sub["notice_thread_id"], "revision": 1,
        "from": SYSTEM_SENDER, "sender_name": SYSTEM_SENDER, "sender_id": SYSTEM_SENDER,
        "sender_location": {"project_key": project_key, "bound_source": None},
        "to": [sub["subscriber"]], "cc": [], "bcc": [],
        "subject": subject, "body_md": body, "topic": None,
        "importance": "normal", "ack_required": False, "delivery_policy": "checked",
        "resource_notice": None, "summary": None, "in_reply_to": sub["message_id"] or None,
        "probe": False,
        "idle_notice": {"subscription_id": sub["id"], "target": sub["target"],
                        "target_id": sub["target_id"], "state": state},
    }
    return pack_message(message)


def _refused(target: str, reason: str, *, persisted: bool,
             candidates: list[str] | None = None) -> CourierError:
    code = REASON_CODES.get(reason, "RECIPIENT_NOT_FOUND")
    failure: Json = {"to": target, "reason": reason, "reason_code": code,
                     **({"candidates": candidates} if candidates else {})}
    return CourierError(
        code, f"no subscription: the target cannot be watched: {failure_text(failure)}",
        {"field": "target", "recipients": [failure]}, persisted=persisted,
    )


async def _target(store: Store, project_id: str, target: str, subscriber_id: str) -> Json:
    """The agent a subscription's target reaches.

    Raises:
        CourierError: it reaches none (a recipient's error; nothing stored).
    """
    agent, reason, tied = await store.live.resolve_target(project_id, resolvable(target),
                                                          subscriber_id)
    if agent is None:
        if len(target) > RECIPIENT_MAX:
            reason = "too_long"
        raise _refused(resolvable(target), reason, persisted=False, candidates=tied)
    return agent


def view(sub: Json) -> Json:
    """A subscription as the API shows it."""
    notified = sub.get("state") == "notified"
    return {
        "subscription_id": sub["id"],
        "kind": sub["kind"],
        "subscriber": sub["subscriber"],
        "notice_to": sub.get("notice_to") or "you",
        "target": sub["target"],
        "target_id": sub["target_id"],
        "state": sub["state"],
        "outcome": sub.get("outcome") or None,
        "created_ts": rfc3339(sub["created_us"]),
        "expires_ts": rfc3339(int(sub["expires_ms"]) * 1000),
        "notified_ts": rfc3339(sub.get("notified_us")),
        "ttl_s": int(sub["ttl_s"]),
        "message_id": sub["message_id"] or None,
        "notice": {"message_id": sub["notice_message_id"],
                   "delivery_id": sub["notice_delivery_id"]} if notified else None,
    }


async def _send_first(
    store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller,
    message: SubscriptionMessageIn, target: str,
) -> SendAnswer:
    """Send the subscription's message to its target now."""
    fields = message.model_dump(mode="json", exclude_unset=True)
    try:
        send_body = SendIn.model_validate_json(json.dumps({**fields, "to": [target]}))
    except ValidationError as exc:
        raise from_validation(exc, "message.") from None
    return await send(store, settings, dispatcher, caller, send_body)


def _textless(message: SubscriptionMessageIn | None) -> bool:
    """True for no message, or one with no text at all (no subject, a blank body, no
    resource notice): such a subscription sends the target nothing."""
    return message is None or (
        message.resource_notice is None and not (message.subject or "").strip()
        and not (message.body_md or "").strip())


async def subscribe(
    store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller,
    body: SubscriptionIn,
) -> SendAnswer:
    """Subscribe to the target's next idle or exit; 201 with the subscription.

    With a message, the message is sent first (all of Sending's rules apply)
    and the notice waits for the target's next idle or exit after it.

    Raises:
        CourierError: the target cannot be resolved or watched, or the message
            is refused; nothing is stored.
    """
    project_id, subscriber_id = caller.require_agent()
    subscriber = await store.get_agent(project_id, subscriber_id)
    project = await store.get_project(project_id)
    if subscriber is None or project is None:
        raise unauthenticated("unknown token")
    if subscriber.get("parent"):
        raise CourierError("INVALID_ARGUMENT", MAIN_ONLY,
                           {"field": "subscriber", "parent": subscriber["parent"]})
    now = now_us()
    sent = None
    message = None if _textless(body.message) else body.message
    if message is not None:
        sent = await _send_first(store, settings, dispatcher, caller, message, body.target)
        target_obs = sent.body["delivery"]["observations"][0]
        target_id, target_label = target_obs["agent_id"], target_obs["recipient"]
        if target_id is None:
            raise CourierError(
                "RECIPIENT_NOT_FOUND",
                f"the message was sent and waits for {body.target} to register; "
                "no agent to watch yet, subscribe again once it has",
                {"field": "target", "message_id": sent.body["id"]}, persisted=True)
        # Derived from the message: a retried request finds the same subscription.
        sub_id = "sub_" + sent.body["id"].removeprefix("msg_")
    else:
        target = await _target(store, project_id, body.target, subscriber_id)
        target_id, target_label = target["id"], label(target)
        sub_id = new_subscription_id(project_id)
    notice_mid = ids.new_message_id(project_id)
    sub: Json = {
        "id": sub_id, "project_id": project_id, "kind": body.kind,
        "subscriber_id": subscriber_id, "subscriber": label(subscriber),
        # Who sees the notice first: a subscriber that holds peer mail, its user.
        "notice_to": "your_user" if subscriber.get("inbound") == Inbound.HOLD else "you",
        "target_id": target_id, "target": target_label,
        "created_us": now, "expires_ms": now // 1000 + body.ttl_s * 1000, "ttl_s": body.ttl_s,
        "message_id": sent.body["id"] if sent else "",
        "notice_message_id": notice_mid,
        "notice_delivery_id": ids.new_delivery_id(project_id),
        "notice_thread_id": sent.body["thread_id"] if sent else notice_mid,
    }
    for state in NOTICE_STATES:
        sub[f"notice_{state}"] = _notice_json(state, sub, project["project_key"])
    answer = await store.live.subscribe(project_id, Subscription(
        sub_id, target_id, sub["expires_ms"], sent is not None, subscriber_id, notice_mid,
        sub["notice_delivery_id"], sub["notice_thread_id"], sub,
    ), now, now // 1000 + int(settings.outbox_grace_s * 1000))
    if answer.status == "refused":
        raise _refused(body.target, answer.reason, persisted=sent is not None)
    if answer.status == "notified" and answer.transport:  # "": held for the user
        dispatcher.submit(project_id, answer.transport, answer.delivery_id)
    stored = await store.live.get_subscription(project_id, sub_id)
    if stored is None:
        raise not_found("subscription")
    out = {**view(stored), "message": sent.body if sent else None}
    return SendAnswer(200 if answer.status == "exists" else 201, out)


