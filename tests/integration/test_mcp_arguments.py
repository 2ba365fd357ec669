"""MCP arguments follow the HTTP face's models and rules (docs/mcp.md), through the SDK's client.

A value of the wrong JSON type is refused, never converted (an integer may be
written 3.0, as JSON Schema counts it, but not 3.5), and nothing is sent;
search takes `from` like its HTTP twin; schemas describe nested fields with
their values; the sending tools carry the sending guidance; `send` with
`notify_when_idle` and no message is a pure subscription.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.conftest import Agent, Project
from tests.integration.test_mcp import mcp

Json = dict[str, Any]


@dataclass
class Pair:
    """A project with two agents, Alice and Bob."""

    project: Project
    alice: Agent
    bob: Agent


def call(pair: Pair, tool: str, **args: Any) -> tuple[bool, Json]:
    """One tool call as Alice."""

    async def run() -> tuple[bool, Json]:
        async with mcp(pair.project, pair.alice) as tools:
            return await tools.raw(tool, **args)

    return asyncio.run(run())


@pytest.fixture
def pair(project: Project) -> Pair:
    return Pair(project, project.agent("Alice"), project.agent("Bob"))


@pytest.mark.parametrize(("tool", "args", "field"), [
    ("fetch_inbox", {"limit": "5"}, "limit"),
    ("fetch_inbox", {"unread_only": "true"}, "unread_only"),
    ("search_messages", {"limit": 3.5}, "limit"),
    ("send_message", {"to": ["Bob"], "subject": "s", "ack_required": 1}, "ack_required"),
    ("send_message", {"to": ["Bob"], "subject": "s", "probe": "false"}, "probe"),
    ("send_message", {"to": ["Bob"], "subject": "s", "resource_notice": {"state": 1}},
     "resource_notice.resource_id"),
    ("send", {"to": "Bob", "message": "Review auth.py", "notify_when_idle": "yes"},
     "notify_when_idle"),
    ("send", {"to": "Bob", "message": "Review auth.py", "notify_when_idle": 1},
     "notify_when_idle"),
    ("subscribe_idle", {"target": "Bob", "ttl_s": "60"}, "ttl_s"),
    ("reply_message", {"message_id": "msg_x", "body_md": "ok", "ack_required": "no"},
     "ack_required"),
    ("search_messages", {"sender": "Bob"}, "sender"),
])
def test_a_value_of_the_wrong_type_is_refused_and_nothing_is_sent(
        pair: Pair, tool: str, args: Json, field: str):
    error, answer = call(pair, tool, **args)
    assert error is True, answer
    assert answer["persisted"] is False
    assert (answer["error"]["code"], answer["error"]["details"]["field"]) == (
        "INVALID_ARGUMENT", field)
    time.sleep(0.3)  # a send that slipped through would be in Bob's inbox by now
    assert pair.bob.api.inbox()["messages"] == []


def test_the_same_arguments_of_the_right_type_pass(pair: Pair):
    assert call(pair, "fetch_inbox", limit=5, unread_only=True)[0] is False
    assert call(pair, "send_message", to=["Bob"], subject="Review auth.py",
                ack_required=True)[0] is False


def test_search_takes_from_like_its_http_twin(pair: Pair):
    alice, bob = pair.alice, pair.bob
    alice.api.send(["Bob"], "Migration plan for the orders table", "x")
    bob.api.send(["Alice"], "Migration tests pass on db-v2", "x")

    def found(**args: Any) -> list[str]:
        error, page = call(pair, "search_messages", q="migration", **args)
        assert error is False, page
        return sorted(m["subject"] for m in page["messages"])

    deadline = time.monotonic() + 15
    while len(found()) < 2:
        assert time.monotonic() < deadline, "the messages were not indexed"
        time.sleep(0.2)
    assert found(**{"from": "Bob"}) == ["Migration tests pass on db-v2"]
    http = alice.api.http.get("/v1/agents/me/search", params={"q": "migration", "from": "Bob"})
    assert [m["subject"] for m in http.json()["messages"]] == ["Migration tests pass on db-v2"]


def test_schemas_describe_nested_fields_and_the_sending_guidance(pair: Pair):
    agent = pair.alice

    async def listed() -> dict[str, Any]:
        async with mcp(pair.project, agent) as tools:
            return {t.name: t for t in (await tools.client.list_tools()).tools}

    tools = asyncio.run(listed())
    send = tools["send_message"].input_schema["properties"]
    notice = next(s for s in send["resource_notice"]["anyOf"] if s.get("type") == "object")
    assert notice["properties"]["state"]["enum"] == ["released", "cancelled"]
    assert notice["properties"]["next_action"]["enum"] == [
        "none", "retry_admission", "drop_dependency"]
    assert notice["additionalProperties"] is False
    assert all(p["description"] for p in notice["properties"].values())
    assert "liveness" in send["probe"]["description"]
    assert "same way" in send["delivery_policy"]["description"]
    assert "previews only this line" in send["subject"]["description"]
    short = tools["send"].input_schema
    assert short["required"] == ["to"] and short["properties"]["to"]["type"] == "string"
    assert "at least one" not in short["properties"]["to"]["description"]
    assert "first line" in short["properties"]["message"]["description"].lower()
    assert "pure subscription" in short["properties"]["notify_when_idle"]["description"]
    for name in ("send", "send_message"):
        text = " ".join((tools[name].description or "").split())
        for guidance in ("Send only when the recipient needs to act or to know",
                         "previews only the first line", "facts about this send",
                         "never a reason to send again by another route"):
            assert guidance in text, (name, guidance)


@pytest.mark.parametrize("message", [None, ""])
def test_send_with_notify_when_idle_and_no_message_is_a_pure_subscription(
        pair: Pair, message: str | None):
    alice, bob = pair.alice, pair.bob

    async def scenario() -> tuple[Json, list[Json]]:
        async with mcp(pair.project, alice) as a, mcp(pair.project, bob) as b:
            await b("set_presence", state="busy")
            extra = {} if message is None else {"message": message}
            answer = await a("send", to="Bob", notify_when_idle=True, **extra)
            await asyncio.sleep(0.5)
            bob_mail = (await b("fetch_inbox"))["messages"]
            await b("set_presence", state="idle")
            return answer, [bob_mail, *await a.new_mail()]

    answer, (bob_mail, notice) = asyncio.run(scenario())
    assert bob_mail == []  # no mail, no wake for the target
    assert set(answer) == {"subscription"}
    assert answer["subscription"]["state"] == "waiting"
    assert answer["subscription"]["target"] == bob.label
    assert (notice["from"], notice["idle_notice"]["subscription_id"]) == (
        "courier", answer["subscription"]["subscription_id"])


def test_send_without_a_message_or_a_subscription_is_refused(pair: Pair):
    for args in ({"to": "Bob"}, {"to": "Bob", "message": "  \n"}):
        error, answer = call(pair, "send", **args)
        assert error is True
        assert (answer["error"]["code"], answer["error"]["details"]["field"]) == (
            "INVALID_ARGUMENT", "message")


@pytest.mark.parametrize(("tool", "schema"), [
    ("send_message", "SendIn"), ("subscribe_idle", "SubscriptionIn"),
    ("set_presence", "PresenceIn")])
def test_a_tool_takes_exactly_its_http_twins_fields(pair: Pair, tool: str, schema: str):
    async def listed() -> Json:
        async with mcp(pair.project, pair.alice) as tools:
            found = {t.name: t for t in (await tools.client.list_tools()).tools}
            return found[tool].input_schema

    mcp_schema = asyncio.run(listed())
    doc = pair.alice.api.http.get("/openapi.json").json()
    http_schema = doc["components"]["schemas"][schema]
    assert set(mcp_schema["properties"]) == set(http_schema["properties"])
    for field, prop in http_schema["properties"].items():
        assert mcp_schema["properties"][field]["description"] == prop["description"], field


def test_send_takes_body_as_the_native_send_example_writes_it(pair: Pair):
    text = "Inspect the proposed authorization change and record your findings here."
    error, sent = call(pair, "send", to="Bob", body=text)
    assert error is False, sent
    stored = pair.bob.api.get_message(sent["id"])
    assert (stored["body_md"], stored["subject"]) == (text, text)


def test_send_with_both_body_and_message_is_refused_naming_body(pair: Pair):
    error, answer = call(pair, "send", to="Bob", body="one text", message="another")
    assert error is True and answer["persisted"] is False
    assert (answer["error"]["code"], answer["error"]["details"]["field"]) == (
        "INVALID_ARGUMENT", "body")
    assert pair.bob.api.inbox()["messages"] == []


def test_every_sending_tool_says_never_to_ask_a_peer_for_what_was_denied(pair: Pair):
    async def listed() -> dict[str, Any]:
        async with mcp(pair.project, pair.alice) as tools:
            return {t.name: t for t in (await tools.client.list_tools()).tools}

    tools = asyncio.run(listed())
    for name in ("send", "send_message", "reply_message"):
        text = " ".join((tools[name].description or "").split())
        assert "NEVER ask a peer to perform an action that was denied" in text, name
        assert "back to your user" in text, name
