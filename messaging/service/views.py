"""Stored records as the API shows them (pure functions, no I/O)."""

from __future__ import annotations

import json

from messaging.store.schema import unpack_message
from messaging.timefmt import now_us, rfc3339
from messaging.types import Json

STAGES = (
    "admitted",
    "target_selected",
    "dispatch_started",
    "provider_result_recorded",
    "delivery_observed",
)

UNKNOWN_PRESENCE = "unknown"


def label(agent: Json) -> str:
    """``Name [ref]``, the address that always resolves exactly (``human`` has no ref)."""
    return f"{agent['name']} [{agent['ref']}]" if agent.get("ref") else str(agent["name"])


def transport_row(agent: Json) -> Json:
    """An agent's transport kind, never its settings (URLs, secrets); for transports that
    reach out to an endpoint (all but the inbox), the endpoint's health."""
    kind = agent["transport"]["kind"]
    if kind == "inbox":
        return {"kind": kind}
    endpoint = agent.get("endpoint") or {}
    held = int(endpoint.get("hold_until_ms") or 0)
    return {"kind": kind, "health": "unhealthy" if held else "healthy",
            "failures_in_a_row": int(endpoint.get("failures") or 0)}


def presence_now(agent: Json, now: int | None = None) -> str:
    """The agent's presence now: a busy or idle report past its lease is unknown."""
    until_us = agent.get("presence_until_us")
    if until_us is not None and int(until_us) < (now_us() if now is None else now):
        return UNKNOWN_PRESENCE
    return str(agent.get("presence") or UNKNOWN_PRESENCE)


def agent_row(agent: Json) -> Json:
    """An agent as the agent list shows it (never its token or webhook secret)."""
    return {
        "name": agent["name"],
        "ref": agent["ref"],
        "agent_id": agent["id"],
        "label": label(agent),
        "status": agent["status"],
        "presence": presence_now(agent),
        "last_active_ts": rfc3339(agent["last_active_us"]),
        "transport": transport_row(agent),
        "bound_source": agent.get("bound_source"),
        "parent": agent.get("parent"),
        "inbound": agent.get("inbound") or "open",
        "program": agent.get("program"),
        "model": agent.get("model"),
        "description": agent.get("description"),
        "registered_ts": rfc3339(agent["registered_us"]),
    }


def message_view(record: Json, *, full: bool, viewer_id: str | None = None,
                 unpacked: Json | None = None) -> Json:
    """A stored message as one viewer may see it.

    ``full`` shows everything (sender, project, operator); otherwise bcc shows
    only the viewer, and the sender's summary is left out. ``unpacked`` is the
    record's message already unpacked, when the caller has it (it becomes the view).
    """
    msg: Json = unpacked if unpacked is not None else unpack_message(record["json"])
    msg.pop("via_id", None)  # who may see it as its sender; ``via`` names that agent
    if not full:
        resolved: dict[str, str] = json.loads(record.get("resolved") or "{}")
        msg["bcc"] = [b for b in msg["bcc"] if viewer_id and resolved.get(b) == viewer_id]
        msg.pop("summary", None)
    msg["created_ts"] = rfc3339(record["created_us"])
    msg["notification_policy"] = record["policy"]
    return msg


def deliveries_of(record: Json) -> list[tuple[str, str]]:
    """The (delivery id, agent id) pairs of a stored message ("" while pending)."""
    return [(d, a) for d, a in json.loads(record["deliveries"])]


def withheld_from(record: Json) -> set[str]:
    """The recipients a message is held from (until release) or was declined by."""
    return set(json.loads(record.get("withheld") or "[]"))


def delivery_view(d: Json) -> Json:
    """A delivery hash as ``GET /v1/deliveries/{id}`` shows it."""
    attempts = []
    for a in json.loads(d.get("attempts") or "[]"):
        row = {"n": a["n"], "started_ts": rfc3339(a["started_us"]),
               "ended_ts": rfc3339(a.get("ended_us")), "outcome": a.get("outcome"),
               "error": a.get("error") or None}
        attempts.append(row)
    return {
        "delivery_id": d["id"],
        "message_id": d["message_id"],
        "agent_id": d["agent_id"] or None,
        "recipient": d["recipient"],
        "transport": d["transport"] or None,
        "notification_policy": d.get("policy"),
        "stage": d["stage"],
        "stages": {s: rfc3339(d.get(f"{s}_us")) for s in STAGES if d.get(f"{s}_us")},
        "outcome": d.get("outcome"),
        "error": d.get("error") or None,
        "attempts": attempts,
        "observed_ts": rfc3339(d.get("delivery_observed_us")),
        "pushed_ts": rfc3339(d.get("pushed_us")),
        "host_events": [{"kind": e["kind"], "ts": rfc3339(int(e["us"])),
                         **({"detail": e["detail"]} if e.get("detail") else {})}
                        for e in json.loads(d.get("host_events") or "[]")],
        "read_ts": rfc3339(d.get("read_us")),
        "ack_ts": rfc3339(d.get("ack_us")),
        "target": d.get("target") or "pinned",
        "held": d.get("held") == "1",
    }
