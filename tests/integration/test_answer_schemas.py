"""Every route's real answer is what /openapi.json says it is (docs/http-api.md).

One request per documented operation, to the running stack, with mail rich
enough to carry every optional field (a subagent's send, a resource notice, a
reply, held and pending mail, a webhook agent, a finished delivery). Each
answer is compared with the schema of its status, recursively: a field the
schema does not name, a type it does not allow, a required field missing, or
an object or value whose schema says nothing of its form, fails.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Agent, Project, open_project
from tests.stack import Stack, wait_until

Json = dict[str, Any]
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "null": (type(None),), "array": (list,), "object": (dict,)}
TEXT = "text/"


def json_type(value: Any) -> str:
    """The JSON Schema type of a parsed JSON value (``true`` is no integer)."""
    if isinstance(value, bool):
        return "boolean"
    for name, kinds in JSON_TYPES.items():
        if name != "number" and isinstance(value, kinds):
            return name
    return "number"


def resolve(schema: Json, doc: Json) -> Json:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = doc["components"]["schemas"][name]
    return schema


def mismatches(value: Any, schema: Json, doc: Json, at: str = "$") -> list[str]:
    """Where ``value`` says more than ``schema``, or other than it; [] when it fits."""
    schema = resolve(schema, doc)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        found = [mismatches(value, b, doc, at) for b in branches]
        return min(found, key=len)
    if "const" in schema and value != schema["const"]:
        return [f"{at}: {value!r} is not {schema['const']!r}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{at}: {value!r} is none of {schema['enum']}"]
    kinds = schema.get("type")
    if kinds is None:
        return [f"{at}: the schema says nothing of this {json_type(value)}"]
    kinds = [kinds] if isinstance(kinds, str) else kinds
    kind = json_type(value)
    if kind not in kinds and not (kind == "integer" and "number" in kinds):
        return [f"{at}: {kind} {value!r} where the schema says {'|'.join(kinds)}"]
    if kind == "array":
        items = schema.get("items")
        if items is None:
            return [f"{at}: the schema says nothing of the items"]
        return [m for i, v in enumerate(value) for m in mismatches(v, items, doc, f"{at}[{i}]")]
    if kind == "object":
        return object_mismatches(value, schema, doc, at)
    return []


def object_mismatches(value: Json, schema: Json, doc: Json, at: str) -> list[str]:
    properties: Json = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    # ``additionalProperties: true`` beside named fields lets more come later; it does
    # not describe a field that comes now.
    mapped = extra if isinstance(extra, dict) else None
    if not properties and mapped is None:
        return [f"{at}: the schema says nothing of this object's fields"]
    out = [f"{at}.{k}: required, missing" for k in schema.get("required", []) if k not in value]
    for key, item in value.items():
        if key in properties:
            out += mismatches(item, properties[key], doc, f"{at}.{key}")
        elif mapped is not None:
            out += mismatches(item, mapped, doc, f"{at}.{key}")
        else:
            out.append(f"{at}.{key}: not in the schema ({item!r})")
    return out


@dataclass
class World:
    """One project's agents and mail, with an answer of every kind to show."""

    stack: Stack
    project: Project
    doc: Json
    agents: dict[str, Agent] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)

    def as_(self, who: str) -> httpx.Client:
        """The HTTP client of an agent, ``project`` or ``operator``."""
        if who == "project":
            return self.project.admin.http
        if who == "operator":
            return self.project.client(self.stack.operator_token).http
        return self.agents[who].api.http

    def spare_agent(self, name: str) -> Agent:
        """A new agent, for a call that ends or changes it."""
        return self.project.agent(f"{name}{uuid.uuid4().hex[:6]}")


def first_delivery(sent: Json) -> str:
    return str(sent["delivery"]["observations"][0]["delivery_id"])


def build(stack: Stack, project: Project, doc: Json) -> World:
    w = World(stack, project, doc)
    source = {"kind": "claude-code", "thread_id": "t-41", "title": "Release prep",
              "link": "https://example.com/t-41"}
    w.agents["Lead"] = project.agent("Lead", bound_source=source, program="claude-code",
                                     model="m-1", description="Leads the release")
    w.agents["Sub"] = project.agent("Sub", parent=w.agents["Lead"].id)
    w.agents["Ops"] = project.agent("Ops")
    w.agents["Watcher"] = project.agent("Watcher")
    w.agents["Keeper"] = project.agent("Keeper", inbound="hold")
    w.agents["Hook"] = project.agent("Hook", transport={
        "kind": "webhook", "url": "http://127.0.0.1:9/hook"})
    sub, ops, lead = w.agents["Sub"].api, w.agents["Ops"].api, w.agents["Lead"].api
    project.admin.allow_name(project.project_id, "Later")
    handoff = {"cc": ["Lead"], "bcc": ["Watcher"], "topic": "release", "importance": "high",
               "ack_required": True, "summary": "build handoff", "idempotency_key": "h-1",
               "delivery_policy": "durable", "notification_policy": "wake"}
    sent = sub.send("Ops", "The build is broken on main", "Fix `make dist`.", **handoff)
    w.ids |= {"message": sent["id"], "thread": sent["thread_id"],
              "delivery": first_delivery(sent)}
    w.ids["reply"] = ops.reply(sent["id"], "Fixed in 3f2a.")["id"]
    lead.send("Ops", resource_notice={"resource_id": "db-lock", "phase_id": "migrate:1",
                                      "state": "released", "next_action": "retry_admission"},
              idempotency_key="n-1")
    lead.send(["Later", "human"], "Waiting for Later", "x", probe=True)
    w.ids["held"] = first_delivery(ops.send("Keeper", "For the keeper", "x"))
    w.ids["declined"] = first_delivery(ops.send("Keeper", "Declined", "x"))
    project.admin.decline(w.ids["declined"])
    w.ids["subscription"] = ops.subscribe_idle("Lead", message={"subject": "Ping me"})[
        "subscription_id"]
    ops.mark_read(sent["id"])
    wait_until(lambda: ops.delivery(w.ids["delivery"])["attempts"]
               and ops.delivery(w.ids["delivery"])["outcome"], what="the delivery's outcome")
    wait_until(lambda: ops.search("build")["messages"], what="the handoff indexed")
    return w


@pytest.fixture(scope="module")
def world(stack: Stack) -> Iterator[World]:
    doc = httpx.get(stack.api_url + "/openapi.json", timeout=10).json()
    with open_project(stack) as project:
        yield build(stack, project, doc)


Call = Callable[[World], httpx.Response]
Calls = Call | Callable[[World], list[httpx.Response]]


def get(who: str, path: str, **params: Any) -> Call:
    return lambda w: w.as_(who).get(path.format(**w.ids, pid=w.project.project_id),
                                    params=params)


def post(who: str, path: str, body: Json | None = None) -> Call:
    return lambda w: w.as_(who).post(path.format(**w.ids, pid=w.project.project_id),
                                     json=body if body is not None else {})


def send_handoff(w: World) -> httpx.Response:
    return w.as_("Sub").post("/v1/messages", json={
        "to": ["Ops"], "subject": "The build is broken on main", "body_md": "Fix `make dist`.",
        "cc": ["Lead"], "bcc": ["Watcher"], "topic": "release", "importance": "high",
        "ack_required": True, "summary": "build handoff", "idempotency_key": "h-1",
        "delivery_policy": "durable", "notification_policy": "wake"})


def send_notice(w: World) -> httpx.Response:
    return w.as_("Lead").post("/v1/messages", json={
        "to": ["Ops"], "idempotency_key": f"n-{uuid.uuid4().hex}",
        "resource_notice": {"resource_id": "db-lock", "phase_id": "migrate:2",
                            "state": "cancelled", "next_action": "drop_dependency"}})


def send_to_pending_and_held(w: World) -> httpx.Response:
    return w.as_("Sub").post("/v1/messages", json={
        "to": ["Later", "Keeper", "human"], "subject": "Waiting", "probe": True})


def each(*calls: Call) -> Callable[[World], list[httpx.Response]]:
    """Several requests for one operation: answers that differ in what they carry."""
    return lambda w: [call(w) for call in calls]


def new_project(w: World) -> httpx.Response:
    return w.as_("operator").post("/v1/projects", json={
        "project_key": f"/srv/checkouts/{uuid.uuid4().hex}", "name": "spare"})


def new_project_token(w: World) -> httpx.Response:
    spare = new_project(w).json()["project_id"]
    return w.as_("operator").post(f"/v1/projects/{spare}/token")


def register(w: World) -> httpx.Response:
    return w.as_("project").post(f"/v1/projects/{w.project.project_id}/agents", json={
        "name": "Relay", "transport": {"kind": "webhook",
                                               "url": "http://127.0.0.1:9/hook2"},
        "bound_source": {"kind": "t3", "thread_id": "th-1"}, "inbound": "hold"})


def on_spare_agent(action: str) -> Call:
    def call(w: World) -> httpx.Response:
        agent = w.spare_agent("Spare")
        return w.as_("project").post(
            f"/v1/projects/{w.project.project_id}/agents/{agent.id}/{action}")
    return call


def lane(method: str) -> Call:
    def call(w: World) -> httpx.Response:
        spare = new_project(w).json()["project_id"]
        operator = w.as_("operator")
        operator.put(f"/v1/projects/{spare}/lane", json={"lane": "bulk"})
        if method == "PUT":
            return operator.put(f"/v1/projects/{spare}/lane", json={"lane": "bulk"})
        return operator.delete(f"/v1/projects/{spare}/lane")
    return call


def end_name(w: World) -> httpx.Response:
    pid = w.project.project_id
    w.as_("project").put(f"/v1/projects/{pid}/names/Gone", json={})
    return w.as_("project").delete(f"/v1/projects/{pid}/names/Gone")


def release(w: World) -> httpx.Response:
    did = first_delivery(w.agents["Ops"].api.send("Keeper", "Release me", "x"))
    return w.as_("project").post(f"/v1/deliveries/{did}/release")


def decline(w: World) -> httpx.Response:
    did = first_delivery(w.agents["Ops"].api.send("Keeper", "Decline me", "x"))
    return w.as_("project").post(f"/v1/deliveries/{did}/decline")


def twice(call: Call) -> Call:
    """The call made again: an idempotent replay, when it carries a key."""
    return lambda w: [call(w) for _ in range(2)][-1]


def notified_subscription(w: World) -> httpx.Response:
    sid = w.as_("Lead").post("/v1/subscriptions", json={"target": "Watcher"}).json()[
        "subscription_id"]
    w.as_("Watcher").put("/v1/agents/me/presence", json={"state": "idle"})
    wait_until(lambda: w.as_("Lead").get(f"/v1/subscriptions/{sid}").json()["notice"],
               what="the idle notice")
    return w.as_("Lead").get(f"/v1/subscriptions/{sid}")


def events(w: World) -> httpx.Response:
    with w.as_("Ops").stream("GET", "/v1/agents/me/events") as stream:
        return httpx.Response(stream.status_code, headers=stream.headers, content=b"")


# One request per documented operation and answer: (METHOD, path, status) -> the call.
CASES: dict[tuple[str, str, str], Calls] = {
    ("GET", "/healthz", "200"): get("Ops", "/healthz"),
    ("GET", "/readyz", "200"): get("Ops", "/readyz"),
    ("GET", "/metrics", "200"): get("operator", "/metrics"),
    ("POST", "/v1/projects", "201"): new_project,
    ("GET", "/v1/projects", "200"): get("operator", "/v1/projects", limit=3),
    ("POST", "/v1/projects/{project_id}/token", "201"): new_project_token,
    ("POST", "/v1/projects/{project_id}/agents", "201"): register,
    ("GET", "/v1/projects/{project_id}/agents", "200"): get(
        "project", "/v1/projects/{pid}/agents"),
    ("POST", "/v1/projects/{project_id}/agents/{agent_id}/retire", "200"): on_spare_agent(
        "retire"),
    ("POST", "/v1/projects/{project_id}/agents/{agent_id}/close", "200"): on_spare_agent(
        "close"),
    ("POST", "/v1/projects/{project_id}/agents/{agent_id}/token", "201"): on_spare_agent(
        "token"),
    ("PUT", "/v1/agents/me/presence", "200"): lambda w: w.as_("Ops").put(
        "/v1/agents/me/presence", json={"state": "busy"}),
    ("GET", "/v1/projects/{project_id}", "200"): get("project", "/v1/projects/{pid}"),
    ("PUT", "/v1/projects/{project_id}/lane", "200"): lane("PUT"),
    ("DELETE", "/v1/projects/{project_id}/lane", "200"): lane("DELETE"),
    ("PUT", "/v1/projects/{project_id}/names/{name}", "200"): lambda w: w.as_("project").put(
        f"/v1/projects/{w.project.project_id}/names/Soon", json={"ttl_s": 600}),
    ("DELETE", "/v1/projects/{project_id}/names/{name}", "200"): end_name,
    ("GET", "/v1/projects/{project_id}/names", "200"): get("project", "/v1/projects/{pid}/names"),
    ("POST", "/v1/messages", "201"): each(send_notice, send_to_pending_and_held),
    ("POST", "/v1/messages", "200"): send_handoff,
    ("POST", "/v1/messages/{message_id}/reply", "201"): post(
        "Lead", "/v1/messages/{reply}/reply", {"body_md": "Thanks.", "topic": "release"}),
    ("POST", "/v1/messages/{message_id}/reply", "200"): twice(post(
        "Ops", "/v1/messages/{message}/reply", {"body_md": "Same.", "idempotency_key": "r-1"})),
    ("GET", "/v1/messages/{message_id}", "200"): get("Sub", "/v1/messages/{message}"),
    ("POST", "/v1/messages/{message_id}/read", "200"): post("Ops", "/v1/messages/{message}/read"),
    ("POST", "/v1/messages/{message_id}/ack", "200"): post("Ops", "/v1/messages/{message}/ack"),
    ("GET", "/v1/messages/{message_id}/deliveries", "200"): get(
        "Sub", "/v1/messages/{message}/deliveries"),
    ("GET", "/v1/threads/{thread_id}", "200"): get("Ops", "/v1/threads/{thread}"),
    ("GET", "/v1/agents/me/inbox", "200"): get("Ops", "/v1/agents/me/inbox"),
    ("GET", "/v1/deliveries/{delivery_id}", "200"): get("Sub", "/v1/deliveries/{delivery}"),
    ("POST", "/v1/deliveries/{delivery_id}/redrive", "200"): post(
        "project", "/v1/deliveries/{declined}/redrive"),
    ("POST", "/v1/deliveries/{delivery_id}/observed", "200"): post(
        "Ops", "/v1/deliveries/{delivery}/observed"),
    ("POST", "/v1/deliveries/{delivery_id}/host-events", "200"): post(
        "Ops", "/v1/deliveries/{delivery}/host-events", {"kind": "pushed"}),
    ("POST", "/v1/deliveries/{delivery_id}/release", "200"): release,
    ("POST", "/v1/deliveries/{delivery_id}/decline", "200"): decline,
    ("GET", "/v1/projects/{project_id}/held", "200"): get("project", "/v1/projects/{pid}/held"),
    ("POST", "/v1/projects/{project_id}/messages", "201"): post(
        "project", "/v1/projects/{pid}/messages", {"to": ["Ops"], "subject": "From the human"}),
    ("POST", "/v1/projects/{project_id}/messages", "200"): twice(post(
        "project", "/v1/projects/{pid}/messages", {"to": ["Ops"], "subject": "Once",
                                                   "idempotency_key": "hm-1"})),
    ("GET", "/v1/projects/{project_id}/human/inbox", "200"): get(
        "project", "/v1/projects/{pid}/human/inbox"),
    ("GET", "/v1/agents/me/events", "200"): events,
    ("POST", "/v1/subscriptions", "201"): lambda w: w.as_("Lead").post(
        "/v1/subscriptions", json={"target": "Ops", "ttl_s": 60}),
    ("GET", "/v1/subscriptions/{subscription_id}", "200"): each(
        get("Ops", "/v1/subscriptions/{subscription}"), notified_subscription),
    ("GET", "/v1/agents/me/search", "200"): get("Ops", "/v1/agents/me/search", q=""),
    ("GET", "/v1/projects/{project_id}/search", "200"): get(
        "project", "/v1/projects/{pid}/search", q=""),
    ("GET", "/v1/threads/{thread_id}/rendered", "200"): get("Ops", "/v1/threads/{thread}/rendered"),
}
NOT_ASKED = {("GET", "/v1/threads/{thread_id}/rendered", "304")}  # no body to compare


def documented(doc: Json) -> set[tuple[str, str, str]]:
    """Every (METHOD, path, status) of a 2xx or 3xx answer the document lists."""
    return {(method.upper(), path, status) for path, ops in doc["paths"].items()
            for method, op in ops.items() for status in op["responses"]
            if status.startswith(("2", "3"))}


def test_every_documented_answer_has_a_case(world: World):
    assert documented(world.doc) - NOT_ASKED == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES), ids=" ".join)
def test_the_real_answer_is_what_the_schema_says(world: World, case: tuple[str, str, str]):
    method, path, status = case
    made = CASES[case](world)
    content = world.doc["paths"][path][method.lower()]["responses"][status]["content"]
    for answer in made if isinstance(made, list) else [made]:
        assert str(answer.status_code) == status, answer.text
        media = answer.headers["content-type"].split(";")[0]
        assert media in content, (media, list(content))
        if not media.startswith(TEXT):
            found = mismatches(answer.json(), content[media]["schema"], world.doc)
            assert not found, "\n".join(found)
