"""The MCP server at /mcp (docs/http-api.md: MCP), through the official SDK's client over real HTTP.

Each tool returns its HTTP twin's JSON; a refusal is a tool error carrying the
API's error object; the endpoint takes agent tokens only. The last test is the
walkthrough in docs/mcp.md: two agents wired only through MCP hand work to each
other and wait for each other's idle notice.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.conftest import Agent, Project

Json = dict[str, Any]
WAIT_S = 15.0
TOOLS = {"send_message", "reply_message", "fetch_inbox", "mark_read", "acknowledge_message",
         "list_agents", "get_delivery", "subscribe_idle", "send"}


class Tools:
    """One agent's MCP session: call a tool, get its JSON."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.cursor: str | None = None

    async def raw(self, name: str, **args: Any) -> tuple[bool, Json]:
        result = await self.client.call_tool(name, args)
        body = result.structured_content
        assert body is not None and json.loads(result.content[0].text) == body
        return bool(result.is_error), body

    async def __call__(self, name: str, **args: Any) -> Json:
        error, body = await self.raw(name, **args)
        assert not error, body
        return body

    async def new_mail(self, count: int = 1) -> list[Json]:
        """Fetch the inbox past the last cursor until ``count`` new messages came."""
        got: list[Json] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} messages came"
            page = await self("fetch_inbox", **({"cursor": self.cursor} if self.cursor else {}))
            got += page["messages"]
            self.cursor = page["next_cursor"]
            if len(got) < count:
                await asyncio.sleep(0.1)
        return got


@asynccontextmanager
async def mcp(project: Project, agent: Agent) -> AsyncIterator[Tools]:
    """An MCP session as the agent, over streamable HTTP with its bearer token."""
    headers = {"Authorization": f"Bearer {agent.row['token']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            Client(streamable_http_client(f"{project.stack.api_url}/mcp",
                                          http_client=http)) as client:
        yield Tools(client)


def test_the_tools_of_api_md_are_listed(project: Project):
    alice = project.agent("Alice")

    async def names() -> set[str]:
        async with mcp(project, alice) as tools:
            return {t.name for t in (await tools.client.list_tools()).tools}

    assert asyncio.run(names()) >= TOOLS


def test_send_fetch_acknowledge_list_and_get_delivery_return_the_http_json(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")

    async def scenario() -> tuple[Json, Json, Json, Json, Json]:
        async with mcp(project, alice) as a, mcp(project, bob) as b:
            sent = await a("send_message", to=["Bob"], subject="Review", body_md="# auth.py\n",
                           ack_required=True, summary="review ask")
            (mail,) = await b.new_mail()
            acked = await b("acknowledge_message", message_id=sent["id"])
            agents = await b("list_agents")
            delivery = await a("get_delivery", delivery_id=mail["delivery_id"])
            return sent, mail, acked, agents, delivery

    sent, mail, acked, agents, delivery = asyncio.run(scenario())
    assert sent["persisted"] is True and sent["from"] == alice.label
    assert alice.api.get_message(sent["id"]) == {k: v for k, v in sent.items()
                                                 if k not in ("persisted", "idempotent_replay",
                                                              "delivery")}
    assert (mail["id"], mail["body_md"], mail["ack_required"]) == (sent["id"], "# auth.py\n", True)
    assert "summary" not in mail
    assert acked == {"message_id": sent["id"], "delivery_id": mail["delivery_id"],
                     "read_ts": acked["read_ts"], "ack_ts": acked["ack_ts"]} and acked["ack_ts"]
    assert agents == {"agents": project.admin.list_agents(project.project_id)}
    assert delivery == alice.api.delivery(mail["delivery_id"])
    assert delivery["stage"] == "delivery_observed"


def test_a_refusal_is_a_tool_error_carrying_the_api_error_object(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    body = {"to": ["Bob", "Nobody"], "subject": "Handoff", "body_md": "x"}
    http = alice.api.http.post("/v1/messages", json=body)

    async def call() -> tuple[bool, Json]:
        async with mcp(project, alice) as tools:
            return await tools.raw("send_message", **body)

    error, answer = asyncio.run(call())
    assert error is True
    assert answer == http.json() and answer["error"]["code"] == "RECIPIENT_NOT_FOUND"


def test_an_invalid_field_is_a_tool_error_naming_it(project: Project):
    alice = project.agent("Alice")

    async def call() -> tuple[bool, Json]:
        async with mcp(project, alice) as tools:
            return await tools.raw("send_message", to=["Bob"], subject="x", importance="huge")

    error, answer = asyncio.run(call())
    assert error is True and answer["persisted"] is False
    assert (answer["error"]["code"], answer["error"]["details"]["field"]) == (
        "INVALID_ARGUMENT", "importance")


@pytest.mark.parametrize(("token", "status", "code"), [
    (None, 401, "UNAUTHENTICATED"), ("cat_nope", 401, "UNAUTHENTICATED"),
    ("project", 403, "FORBIDDEN")])
def test_mcp_takes_agent_tokens_only(project: Project, token: str | None, status: int,
                                     code: str):
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {project.token if token == 'project' else token}"
    response = httpx.post(f"{project.stack.api_url}/mcp", headers=headers,
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)


def test_subscribe_idle_brings_the_notice_to_the_inbox(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")

    async def scenario() -> tuple[Json, Json]:
        async with mcp(project, alice) as a, mcp(project, bob) as b:
            await b("set_presence", state="busy")
            sub = await a("subscribe_idle", target="Bob", ttl_s=600)
            await b("set_presence", state="idle")
            (notice,) = await a.new_mail()
            return sub, notice

    sub, notice = asyncio.run(scenario())
    assert sub["state"] == "waiting" and sub["target"] == bob.label
    assert (notice["from"], notice["idle_notice"]["subscription_id"]) == (
        "courier", sub["subscription_id"])


def test_two_agents_wired_only_through_mcp_hand_work_and_wait_for_each_other(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")

    async def scenario() -> None:
        async with mcp(project, alice) as a, mcp(project, bob) as b:
            await a("set_presence", state="busy")
            await b("set_presence", state="busy")
            # Alice hands Bob a review and asks to hear when he is done.
            ask = await a("send", to="Bob", message="# Review auth.py\n\nCheck the token "
                          "handling.", notify_when_idle=True)
            assert ask["subscription"]["state"] == "waiting"
            await a("set_presence", state="idle")

            (review,) = await b.new_mail()
            assert (review["id"], review["subject"]) == (ask["id"], "Review auth.py")
            await b("reply_message", message_id=review["id"], body_md="Looks right; one nit.")
            # Bob hands the fix back to Alice; Alice is idle, so his notice waits
            # for her next idle, after she has worked on it.
            fix = await b("send", to="Alice", message="Please fix the nit in auth.py.",
                          notify_when_idle=True)
            await b("set_presence", state="idle")  # Bob is done: Alice's notice

            mail = {m["id"]: m for m in await a.new_mail(3)}
            handoff = mail.pop(fix["id"])
            (bob_done,) = [m for m in mail.values() if m["from"] == "courier"]
            (reply,) = [m for m in mail.values() if m["from"] == bob.label]
            assert reply["subject"] == "Re: Review auth.py"
            assert (bob_done["from"], bob_done["idle_notice"]["target"],
                    bob_done["idle_notice"]["state"]) == ("courier", bob.label, "idle")
            await a("set_presence", state="busy")
            await a("acknowledge_message", message_id=handoff["id"])
            await a("set_presence", state="idle")  # Alice is done: Bob's notice

            (alice_done,) = await b.new_mail()
            assert (alice_done["idle_notice"]["subscription_id"],
                    alice_done["idle_notice"]["state"]) == (fix["subscription"][
                        "subscription_id"], "idle")

    asyncio.run(scenario())
