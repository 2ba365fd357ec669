"""Sending and replying: validation the models cannot do, fingerprints, admission."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter

from messaging import ids
from messaging.config import Settings
from messaging.errors import (
    RECIPIENT_REASON_ORDER,
    CourierError,
    invalid,
    not_found,
    unauthenticated,
)
from messaging.models import (
    HUMAN,
    NOTICE_ID_RE,
    NOTICE_SENDER,
    RECIPIENT_MAX,
    SUBJECT_MAX,
    Importance,
    NotificationPolicy,
    ReplyIn,
    SendIn,
    without_controls,
)
from messaging.service import suggestions
from messaging.service.caller import Caller
from messaging.service.reading import takes_part
from messaging.service.views import deliveries_of, label, message_view, withheld_from
from messaging.store.admission import Admission, AdmitRequest, RateCharge
from messaging.store.schema import Target, pack_message, senders, unpack_message
from messaging.store.store import Store
from messaging.timefmt import now_us, rfc3339
from messaging.types import Json

NOTICE_ACTIONS = {"released": {"none", "retry_admission"}, "cancelled": {"none", "drop_dependency"}}
# A notice's text is Courier's and its delivery is fixed: no free text, no overrides,
# whatever the value (``false`` and ``[]`` included).
NOTICE_EXCLUDES = (
    "subject", "body_md", "cc", "bcc", "importance", "ack_required", "notification_policy",
    "delivery_policy", "topic", "summary", "probe",
)
# Fields that say who is sending or label the sender's own copy: not the request.
NOT_FINGERPRINTED = {"idempotency_key", "project_key", "sender_name", "summary"}
REASON_CODES = {
    "not_found": "RECIPIENT_NOT_FOUND",
    "retired": "RECIPIENT_RETIRED",
    "closed": "RECIPIENT_CLOSED",
    "bound_source_lost": "BOUND_SOURCE_LOST",
    "no_main": "RECIPIENT_NOT_FOUND",  # `main` from an agent without a parent
    "too_long": "RECIPIENT_NOT_FOUND",  # over RECIPIENT_MAX characters: no agent has it
    "ambiguous": "RECIPIENT_AMBIGUOUS",  # a bare name of agents the rules cannot tell apart
}
# A suggested name held by several active agents is suggested as each one's `Name [ref]`,
# read among the agents it was last registered by.
HOLDERS_READ = 8
# Characters of an over-long recipient that an error's message shows.
NAME_SHOWN = 64
WARN_UNKNOWN = "{r}: unknown standalone state is not proof of death"
WARN_EXITED = "{r}: exited; the mail waits until its host resumes it"
WARN_BROKER = (
    "dispatch deferred: publishing this send's deliveries to the broker failed; the outbox "
    "keeps them and they are published when the broker returns"
)
WARN_UNCONFIRMED = (
    "dispatch deferred: the broker had not confirmed this send's deliveries within {ms} ms; "
    "the outbox keeps them and publishes them again if this publish does not go through"
)
# How long an answer waits for the broker to take this send's deliveries.
PUBLISH_WAIT_S = 1.0
WARN_PENDING = (
    "{r}: no agent has this name yet; the mail waits for its first registration until "
    "{expires_ts}, then fails"
)
WARN_HELD = "{r}: held; the recipient's user sees it first and releases or declines it"
NOTE_STORED = "storage is not task acceptance"
# Every face's sends (REST, MCP, subscriptions with a message, the human's) come through
# send() or reply(), so they are counted here and only here. A request refused before it
# reaches them (gate: 401, 429; schema: 422) is no admission (see messaging.web.guard).
ADMISSIONS = Counter("courier_admissions", "Sends and replies answered by the send service, "
                     "by outcome (admitted, replayed) or error code", ["outcome"])


class DeliveryPublisher(Protocol):
    """Where admitted deliveries go to be published."""

    @property
    def ready_kinds(self) -> list[str]:
        """The transports whose deliveries the admission script makes ready."""
        ...

    def submit(self, project_id: str, transport: str,
               delivery_id: str) -> asyncio.Future[bool]:
        """Queue a delivery; the future says whether its publish went through."""
        ...

    def submit_ready(self, project_id: str, transport: str, added: int, lane: str,
                     count: int) -> asyncio.Future[bool]:
        """Queue ``added`` deliveries admission made ready (``count`` ready now, served
        on ``lane``); the future is as ``submit``'s."""
        ...

    @property
    def in_doubt(self) -> bool:
        """True when a failing or silent broker is known: answers wait for their publish."""
        ...


async def dispatch_warning(dispatcher: DeliveryPublisher,
                           published: list[asyncio.Future[bool]]) -> str | None:
    """What an answer must say of publishing these deliveries.

    Nothing, at once, while the publisher trusts the broker: the deliveries are
    in the store and its outbox, and the answer makes no claim on their
    dispatch. While it is in doubt, the answer waits briefly for its own
    publish and says whether it was deferred.
    """
    if not published or not dispatcher.in_doubt:
        return None
    done, _ = await asyncio.wait(published, timeout=PUBLISH_WAIT_S)
    if len(done) < len(published):
        return WARN_UNCONFIRMED.format(ms=int(PUBLISH_WAIT_S * 1000))
    if not all(f.result() for f in done):
        return WARN_BROKER
    return None


@dataclass
class SendAnswer:
    """The answer to a send: the HTTP status and the body."""

    status: int
    body: Json


async def _counted(admission: Awaitable[SendAnswer]) -> SendAnswer:
    """The answer of one send or reply, counted in ``ADMISSIONS`` by outcome (a
    request its rate bucket refused is no admission: not counted)."""
    try:
        sent = await admission
    except CourierError as exc:
        count_refusal(exc)
        raise
    ADMISSIONS.labels(outcome="replayed" if sent.status == 200 else "admitted").inc()
    return sent


def count_refusal(exc: CourierError) -> None:
    """Count a refused send or reply in ``ADMISSIONS``."""
    ADMISSIONS.labels(outcome=exc.code).inc()


def fingerprint(operation: str, request: Json) -> str:
    """SHA-256 of the canonical request: sorted keys, defaults applied, no labels."""
    canonical = {k: v for k, v in request.items() if k not in NOT_FINGERPRINTED}
    text = json.dumps([operation, canonical], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def notice_text(notice: Json, sender_name: str) -> tuple[str, str]:
    """The subject and readable body the service writes for a resource notice: the
    sender's claim, reported as a claim (never as a fact, a permission or a request)."""
    rid, phase, state, action = (
        notice["resource_id"], notice["phase_id"], notice["state"], notice["next_action"],
    )
    if state == "released":
        subject = f"{sender_name} reports `{rid}` released (phase {phase})"
        claim = f"{sender_name} reports that `{rid}` was released (phase `{phase}`)."
    else:
        subject = (f"{sender_name} reports that the dependency on `{rid}` for phase {phase} "
                   "was cancelled")
        claim = (f"{sender_name} reports that the dependency on `{rid}` for phase `{phase}` "
                 "was cancelled.")
    lines = [claim, f"The notice's next_action, as {sender_name} set it: `{action}`.",
             "Courier carries this report as it was made and has not checked it."]
    return subject[:SUBJECT_MAX], "\n\n".join(lines) + "\n"


def _check_notice(body: SendIn) -> None:
    def bad(message: str, field: str = "resource_notice") -> CourierError:
        return CourierError("RESOURCE_NOTICE_INVALID", message, {"field": field})

    notice = body.resource_notice
    if notice is None:
        return
    present = [f for f in NOTICE_EXCLUDES if f in body.model_fields_set]
    if present:
        raise CourierError(
            "RESOURCE_NOTICE_INVALID",
            f"{present[0]}: a resource notice takes no {', '.join(present)} (Courier writes "
            "its text and delivers it the one way)",
            {"field": present[0], "fields": present})
    if len(body.to) != 1:
        raise bad("a resource notice goes to exactly one recipient", "to")
    if not body.idempotency_key:
        raise bad("a resource notice needs a non-empty idempotency_key", "idempotency_key")
    for name in ("resource_id", "phase_id"):
        if not NOTICE_ID_RE.fullmatch(getattr(notice, name)) or not getattr(notice, name).isascii():
            raise bad(f"{name}: 1-96 ASCII letters, digits and _.:-, first a letter or digit",
                      f"resource_notice.{name}")
    allowed = NOTICE_ACTIONS.get(notice.state)
    if allowed is None:
        raise bad("state must be released or cancelled", "resource_notice.state")
    if notice.next_action not in allowed:
        raise bad(f"{notice.state} allows next_action {' or '.join(sorted(allowed))}",
                  "resource_notice.next_action")


def _canonical(body: SendIn) -> Json:
    """The request with defaults applied: what the fingerprint and the message hold."""
    req: Json = body.model_dump(mode="json")
    req["importance"] = req["importance"] or Importance.NORMAL.value
    req["ack_required"] = bool(req["ack_required"])
    req["body_md"] = req["body_md"] if req["body_md"] is not None else ""
    return req


def _check_sender(body: SendIn | ReplyIn, agent: Json) -> None:
    if body.sender_name is not None and body.sender_name != agent["name"]:
        raise CourierError(
            "SENDER_MISMATCH", "sender_name is not the agent of this token",
            {"sender_name": body.sender_name, "token_agent": label(agent)},
        )
    if body.project_key is not None and body.project_key != agent["project_key"]:
        raise CourierError(
            "SENDER_MISMATCH", "project_key is not the project of this token",
            {"project_key": body.project_key},
        )


def _validate(settings: Settings, body: SendIn) -> None:
    if body.resource_notice is not None:
        _check_notice(body)
    elif body.subject is None:
        raise CourierError("INVALID_ARGUMENT", "subject: required", {"field": "subject"})
    if body.body_md is not None and len(body.body_md.encode()) > settings.max_body_bytes:
        raise CourierError(
            "BODY_TOO_LARGE",
            f"body_md is over {settings.max_body_bytes} bytes",
            {"field": "body_md", "max_bytes": settings.max_body_bytes},
        )


def _policy(body: SendIn, req: Json) -> tuple[str, bool]:
    """The policy asked ("auto" for the default rule) and whether quiet is refused."""
    if body.resource_notice is not None:
        quiet = body.resource_notice.next_action == "none"
        return (NotificationPolicy.QUIET if quiet else NotificationPolicy.WAKE).value, False
    asked = body.notification_policy
    if asked is None:
        loud = req["importance"] in ("high", "urgent") or req["ack_required"] or body.probe
        return (NotificationPolicy.WAKE.value if loud else "auto"), False
    refused = asked is NotificationPolicy.QUIET and (
        req["importance"] in ("high", "urgent") or req["ack_required"]
    )
    return asked.value, refused


class BucketEmpty(Exception):
    """The caller's rate bucket had no room for the request a send owed it: nothing
    else was done."""

    def __init__(self, bucket: str, wait_us: int) -> None:
        super().__init__(f"rate bucket {bucket} empty for {wait_us} µs")
        self.bucket, self.wait_us = bucket, wait_us


async def send(
    store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller, body: SendIn,
    rate: RateCharge | None = None,
) -> SendAnswer:
    """Admit a message: all recipients or nothing; publish its deliveries; counted.

    ``rate``: a request the caller still owes to its token's rate bucket, spent
    once by this send whatever it answers: by the admission script, or before a
    refusal that comes first.

    Raises:
        CourierError: any rejection of the Sending rules of docs/http-api.md; nothing stored.
        BucketEmpty: the bucket ``rate`` names was empty (not counted: no admission).
    """
    return await _counted(_admit(store, settings, dispatcher, caller, body, rate=rate))


async def _admit(
    store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller, body: SendIn,
    operation: str = "send", in_reply_to: str | None = None, rate: RateCharge | None = None,
) -> SendAnswer:
    try:
        request = await _request(store, settings, dispatcher, caller, body, operation,
                                 in_reply_to)
    except CourierError:
        await _spend(store, rate)  # an empty bucket answers first
        raise
    admission = await store.admit(request, rate)
    project_id = request.project_id
    if admission.status == "ok":
        published = _hand_over(dispatcher, project_id, admission.answer)
        # What the script stored, without reading it back.
        written = {"json": admission.message_json, "created_us": admission.answer["created_us"],
                   "policy": admission.answer["policy"],
                   "observations": admission.observations}
        warning = await dispatch_warning(dispatcher, published)
        return SendAnswer(201, _answer(written, replay=False, dispatch=warning))
    if admission.status == "replay":
        stored = await store.get_message(project_id, admission.answer["message_id"])
        if stored is None:
            raise not_found("message")
        stored["observations"] = admission.observations
        return SendAnswer(200, _answer(stored, replay=True, dispatch=None))
    if admission.status == "rate_limited" and rate is not None:
        raise BucketEmpty(rate.bucket, admission.rate_wait_us)
    raise await _rejection(store, project_id, admission)


async def _spend(store: Store, rate: RateCharge | None) -> None:
    """Take the request ``rate`` charges from its bucket.

    Raises:
        BucketEmpty: the bucket has no room for it.
    """
    if rate is None:
        return
    wait_us = await store.take_request(rate.bucket, rate.interval_us, rate.burst_us)
    if wait_us > 0:
        raise BucketEmpty(rate.bucket, wait_us)


async def _request(
    store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller, body: SendIn,
    operation: str, in_reply_to: str | None,
) -> AdmitRequest:
    """Check a send and put it as the admission script takes it.

    Raises:
        CourierError: the send breaks a rule checked before its admission.
    """
    project_id, sender_id = caller.require_agent()
    _validate(settings, body)
    sender = await store.identity(project_id, sender_id)
    if sender is None:
        raise unauthenticated("unknown token")
    _check_sender(body, sender)
    # Only a thread's participants post into it; an id no message has is no thread.
    if body.thread_id is not None and not await takes_part(store, caller, body.thread_id):
        raise not_found("thread")
    req = _canonical(body)
    if in_reply_to is not None:
        req["in_reply_to"] = in_reply_to
    policy, quiet_invalid = _policy(body, req)
    subject, body_md = (req["subject"], req["body_md"]) if body.resource_notice is None else (
        notice_text(req["resource_notice"], sender["name"]))
    message_id = ids.new_message_id(project_id)
    recipients = [*body.to, *body.cc, *body.bcc]
    message = {
        "id": message_id, "project_id": project_id,
        "thread_id": body.thread_id or message_id, "revision": 1,
        "sender_location": {"project_key": sender["project_key"],
                            "bound_source": sender.get("bound_source")},
        "to": body.to, "cc": body.cc, "bcc": body.bcc,
        "subject": subject, "body_md": body_md, "topic": body.topic,
        "importance": req["importance"], "ack_required": req["ack_required"],
        "delivery_policy": req["delivery_policy"], "resource_notice": req["resource_notice"],
        "summary": body.summary, "in_reply_to": in_reply_to, "probe": body.probe,
    }
    now = now_us()
    return AdmitRequest(
        project_id=project_id, sender_id=sender_id, message_id=message_id,
        thread_id=message["thread_id"],
        # Compact, defaults left out: every stored byte is kept for the message's
        # lifetime. The script writes who it is from (the sender's address or its
        # root's: it resolves the recipients), first in the stored JSON.
        message_json=pack_message(message),
        recipients=[resolvable(r) for r in recipients],
        delivery_ids=[ids.new_delivery_id(project_id) for _ in recipients],
        now_us=now, due_ms=now // 1000 + int(settings.outbox_grace_s * 1000),
        policy=policy, quiet_invalid=quiet_invalid, has_bcc=bool(body.bcc),
        operation=operation, idempotency_key=body.idempotency_key,
        fingerprint=fingerprint(operation, req) if body.idempotency_key else "",
        ready_kinds=tuple(dispatcher.ready_kinds),
    )


def resolvable(recipient: str) -> str:
    """A recipient as admission resolves it: one over ``RECIPIENT_MAX`` characters reaches
    no agent, so it is cut (still over the limit, marked ``…``) rather than carried whole."""
    return recipient if len(recipient) <= RECIPIENT_MAX else recipient[:RECIPIENT_MAX] + "…"


def _hand_over(dispatcher: DeliveryPublisher, project_id: str,
               answer: Json) -> list[asyncio.Future[bool]]:
    """Hand an admitted send's deliveries to the publisher: those admission made
    ready per transport, any other pinned one (not held) by itself."""
    ready: dict[str, list[int]] = answer["ready"]
    published = [dispatcher.submit_ready(project_id, kind, added, answer["lane"], count)
                 for kind, (added, count) in ready.items()]
    return published + [dispatcher.submit(project_id, obs["transport"], obs["delivery_id"])
                        for obs in answer["observations"]
                        if obs["target"] == Target.PINNED and not obs["held"]
                        and obs["transport"] not in ready]


def _answer(record: Json, *, replay: bool, dispatch: str | None) -> Json:
    observations = record["observations"]
    if isinstance(observations, str):
        observations = json.loads(observations)
    warnings = []
    observations = [_observation(obs) for obs in observations]
    for obs in observations:
        if obs.get("agent_id") == HUMAN:
            continue  # the human's inbox waits for the console: nothing to warn about
        if obs.get("target") == Target.PENDING:
            warnings.append(WARN_PENDING.format(r=obs["recipient"], expires_ts=obs["expires_ts"]))
        elif obs.get("held"):
            warnings.append(WARN_HELD.format(r=obs["recipient"]))
        if obs["presence"] == "unknown":
            warnings.append(WARN_UNKNOWN.format(r=obs["recipient"]))
        elif obs["presence"] == "exited":
            warnings.append(WARN_EXITED.format(r=obs["recipient"]))
    if dispatch is not None:
        warnings.append(dispatch)
    view = message_view(record, full=True)
    return {
        "persisted": True, "idempotent_replay": replay, **view,
        "delivery": {"policy": view["delivery_policy"], "note": NOTE_STORED,
                     "warnings": warnings, "observations": observations},
    }


def _observation(obs: Json) -> Json:
    """An observation as the answer shows it (a pending target's expiry as a timestamp)."""
    out = {k: v for k, v in obs.items() if k != "expires_ms"}
    if "expires_ms" in obs:
        out["expires_ts"] = rfc3339(int(obs["expires_ms"]) * 1000)
    return out


async def _rejection(store: Store, project_id: str, admission: Admission) -> CourierError:
    status = admission.status
    if status == "conflict":
        return CourierError(
            "IDEMPOTENCY_KEY_CONFLICT",
            "this idempotency_key was used with a different request; use a new key",
        )
    if status == "quiet_not_allowed":
        return CourierError(
            "QUIET_NOT_ALLOWED",
            "quiet is refused with high or urgent importance or ack_required",
            {"field": "notification_policy"},
        )
    if status == "sender_gone":
        return unauthenticated("unknown token")
    failures = admission.failures
    for f in failures:
        if len(f["to"]) > RECIPIENT_MAX:
            f["reason"] = "too_long"
    unknown = [f for f in failures if f["reason"] == "not_found"]
    names = await store.agent_names(project_id, suggestions.POOL_MAX) if unknown else []
    close = suggestions.close_names([f["to"].split(" [")[0] for f in unknown], names)
    for f, suggested in zip(unknown, close, strict=True):
        f["suggestions"] = await suggested_addresses(store, project_id, suggested)
    for f in failures:
        f["reason_code"] = REASON_CODES[f["reason"]]
    code = min((f["reason_code"] for f in failures), key=RECIPIENT_REASON_ORDER.index)
    return CourierError(code, "nothing was sent; these recipients cannot take mail: "
                        + ", ".join(failure_text(f) for f in failures), {"recipients": failures})


async def suggested_addresses(store: Store, project_id: str, names: list[str]) -> list[str]:
    """Suggested names as a sender should write them: a name several active agents
    hold, as each one's ``Name [ref]`` (the bare name would be ambiguous or reach
    only the latest)."""
    held = await store.holders(project_id, names, HOLDERS_READ)
    out: list[str] = []
    for name, agents in zip(names, held, strict=True):
        out.extend([label(agent) for agent in agents] if len(agents) > 1 else [name])
    return out


def failure_text(failure: Json) -> str:
    """One failing recipient as an error's message lists it."""
    if failure["reason"] == "ambiguous":
        return (f"{failure['to']} (ambiguous: name one of "
                f"{', '.join(failure['candidates'])})")
    if failure["reason"] == "too_long":
        return f"{failure['to'][:NAME_SHOWN]}… (longer than {RECIPIENT_MAX} characters)"
    return f"{failure['to']} ({failure['reason']})"


async def reply(
    store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller,
    message_id: str, body: ReplyIn,
) -> SendAnswer:
    """Reply to a message: same thread, ``Re:`` subject, to the original sender; counted.

    Raises:
        CourierError: NOT_FOUND unless the caller sent or received the message.
    """
    return await _counted(_reply(store, settings, dispatcher, caller, message_id, body))


async def _reply(
    store: Store, settings: Settings, dispatcher: DeliveryPublisher, caller: Caller,
    message_id: str, body: ReplyIn,
) -> SendAnswer:
    project_id, agent_id = caller.require_agent()
    record = await store.get_message(project_id, message_id) if ids.project_of(
        message_id) == project_id else None
    if record is None:
        raise not_found("message")
    original = unpack_message(record["json"])
    # a recipient the message is held from (or was declined by) knows nothing of it
    receivers = {a for _, a in deliveries_of(record)} - withheld_from(record)
    if agent_id not in senders(original) and agent_id not in receivers:
        raise not_found("message")
    if original["sender_id"] == NOTICE_SENDER:
        raise invalid("message_id", "a notice of Courier's is no agent's message: there is "
                                    "no one to answer")
    sender = await store.get_agent(project_id, original["sender_id"])
    if sender is None:
        raise not_found("agent")
    # Mail admitted before subjects refused control characters has them still.
    subject = without_controls(original["subject"])
    if not subject.lower().startswith("re:"):
        subject = f"Re: {subject}"
    fields = body.model_dump(mode="json", exclude_unset=True)
    fields.setdefault("subject", subject[:SUBJECT_MAX])
    fields.setdefault("importance", original["importance"])
    fields.setdefault("ack_required", original["ack_required"])
    fields.setdefault("topic", original["topic"])
    send_body = SendIn.model_validate_json(
        json.dumps({**fields, "to": [label(sender)], "thread_id": original["thread_id"]})
    )
    return await _admit(
        store, settings, dispatcher, caller, send_body, operation="reply", in_reply_to=message_id
    )
