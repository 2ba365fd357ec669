"""Every record of a project as its clients see it: what backup, restore, migration
and upgrade tests compare between two stores."""

from __future__ import annotations

from typing import Any

from messaging.client import CourierClient

Json = dict[str, Any]

# What a record is made of: the fields compared. Views may gain fields, or show
# others differently (labels, presence, last activity), and still hold the same data.
ID_FIELDS = {"id", "delivery_id", "agent_id", "project_id", "n"}  # n: an attempt
FACTS = ID_FIELDS | {
    "project_key", "name", "ref", "status", "registered_ts", "transport",  # projects, agents
    "thread_id", "subject", "body_md", "to", "cc", "topic", "in_reply_to", "sender_id",
    "created_ts", "read_ts", "ack_ts", "importance", "ack_required",  # messages
    "message_id", "outcome", "stage", "stages", "attempts", "held", "target",  # deliveries
    "started_ts", "ended_ts",  # attempts
}


def stable(value: Any) -> Any:
    """``value`` with each record (a dict with an id) cut down to its ``FACTS``."""
    if isinstance(value, dict):
        record = bool(ID_FIELDS & value.keys())
        return {k: stable(v) for k, v in value.items() if not record or k in FACTS}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def lost(got: Any, expected: Any, path: str = "") -> list[str]:
    """Where ``got`` lacks or changed what ``expected`` holds (fields it gained are fine)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        return [d for k, v in expected.items()
                for d in (lost(got[k], v, f"{path}.{k}") if k in got
                          else [f"{path}.{k}: missing"])]
    if isinstance(expected, list) and isinstance(got, list) and len(got) == len(expected):
        return [d for i, (g, e) in enumerate(zip(got, expected, strict=True))
                for d in lost(g, e, f"{path}[{i}]")]
    return [] if got == expected else [f"{path}: {got!r} != {expected!r}"[:300]]


def agent_records(api: CourierClient) -> Json:
    """What one agent's token reads: its inbox, and every message in it or sent by
    it with that message's deliveries and thread."""
    items = list(api.iter_inbox())
    message_ids = sorted({item["id"] for item in items})
    messages = {mid: api.get_message(mid) for mid in message_ids}
    threads = {m["thread_id"]: api.thread(m["thread_id"]) for m in messages.values()}
    sent_ids = sorted({m["id"] for t in threads.values() for m in t
                       if m["id"] not in messages})
    for mid in sent_ids:
        messages[mid] = api.get_message(mid)
    deliveries = {}
    for mid in sorted(messages):
        try:
            deliveries[mid] = api.message_deliveries(mid)
        except Exception:  # noqa: BLE001 - a recipient may not see a message's deliveries
            deliveries[mid] = None
    return {"inbox": items, "messages": messages, "threads": threads,
            "deliveries": deliveries}


def project_records(operator: CourierClient, project_token: str, project_id: str,
                    agent_tokens: dict[str, str], url: str) -> Json:
    """The project, its agents, and what each agent token reads (tokens by agent name)."""
    with CourierClient(url, project_token) as admin:
        out: Json = {"project": operator.project(project_id),
                     "agents": admin.list_agents(project_id), "by_agent": {}}
    for name, token in sorted(agent_tokens.items()):
        with CourierClient(url, token) as api:
            out["by_agent"][name] = agent_records(api)
    return out
