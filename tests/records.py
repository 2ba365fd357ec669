"""Every record of a project as its clients see it: what backup, restore, migration
and upgrade tests compare between two stores."""

from __future__ import annotations

from typing import Any

from messaging.client import CourierClient

Json = dict[str, Any]

# Fields of the views that say how things are now (reading moves them), not what was stored.
LIVE_FIELDS = {"presence", "last_active_ts"}


def stable(value: Any) -> Any:
    """``value`` without the fields computed from the clock at the time of asking."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in LIVE_FIELDS}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


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
    return stable({"inbox": items, "messages": messages, "threads": threads,
                    "deliveries": deliveries})


def project_records(operator: CourierClient, project_token: str, project_id: str,
                    agent_tokens: dict[str, str], url: str) -> Json:
    """The project, its agents, and what each agent token reads (tokens by agent name)."""
    with CourierClient(url, project_token) as admin:
        out: Json = {"project": operator.project(project_id),
                     "agents": admin.list_agents(project_id), "by_agent": {}}
    for name, token in sorted(agent_tokens.items()):
        with CourierClient(url, token) as api:
            out["by_agent"][name] = agent_records(api)
    return stable(out)
