"""One conversation seen through every face that shows it: the HTTP answers, the
event stream, a webhook receiver, the MCP tools (through the official client) and
the CLI's ``--json`` agree field by field on who a message is from and to, on each
delivery's stage times, and on its errors.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from standardwebhooks import Webhook

from messaging.client import CourierClient, Event
from tests.receiver import Receiver
from tests.stack import Stack, make_stack, wait_until

Json = dict[str, Any]
# What every face must show alike of one message.
MESSAGE_FIELDS = ("id", "thread_id", "from", "sender_name", "sender_id", "to", "cc",
                  "subject", "body_md", "importance", "ack_required", "in_reply_to")
DELIVERY_FIELDS = ("delivery_id", "message_id", "agent_id", "recipient", "transport", "stage",
                   "stages", "outcome", "attempts", "error", "held", "target")


@pytest.fixture(scope="module")
def faces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose worker serves the inbox and webhooks, with a short retry schedule."""
    s = make_stack(tmp_path_factory.mktemp("faces"), webhook_retry_schedule_s="0.2")
    try:
        s.start_worker(queues="deliver.inbox,deliver.webhook,courier.sweep", concurrency=2)
        yield s
    finally:
        s.stop()


class Events:
    """An agent's event stream, read in a thread from the start."""

    def __init__(self, stack: Stack, token: str) -> None:
        self.seen: list[Event] = []
        self.client = CourierClient(stack.api_url, token)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            stream = self.client.events("0", read_timeout_s=30)
            try:
                for event in stream:
                    self.seen.append(event)
                    if self.stop.is_set():
                        break
            finally:
                stream.close()
        except Exception:  # noqa: BLE001 - the client was closed under it: the test is over
            pass
        finally:
            self.client.close()

    def of(self, kind: str, **match: Any) -> list[Json]:
        return [e.data for e in self.seen if e.event == kind
                and all(e.data.get(k) == v for k, v in match.items())]


def over_mcp(stack: Stack, token: str, calls: list[tuple[str, Json]]) -> list[Json]:
    """Tool calls in one MCP session as the token's agent; each call's JSON."""
    async def run() -> list[Json]:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                Client(streamable_http_client(f"{stack.api_url}/mcp", http_client=http)) as c:
            out = []
            for name, args in calls:
                result = await c.call_tool(name, args)
                assert not result.is_error, result.structured_content
                assert result.structured_content is not None
                out.append(result.structured_content)
            return out

    return asyncio.run(run())


def over_cli(stack: Stack, token: str, *args: str) -> Json:
    """One ``courier ... --json`` command as the token's holder; the JSON it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    done = subprocess.run([sys.executable, "-m", "messaging.cli", *args, "--json"],
                          env={**env, "COURIER_URL": stack.api_url, "COURIER_TOKEN": token},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed: Json = json.loads(done.stdout)
    return printed


def same(faces: dict[str, Json], fields: tuple[str, ...]) -> None:
    """Every face shows each field alike (named in the failure)."""
    (first_face, first), *others = faces.items()
    for field in fields:
        for face, shown in others:
            assert shown.get(field) == first.get(field), (field, first_face, face)


@pytest.mark.slow
def test_every_face_agrees_on_addresses_stage_times_and_errors(faces: Stack):
    receiver = Receiver()
    receiver.start()
    with faces.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    admin = faces.client(p["token"])
    lead_row = admin.register_agent(p["project_id"], "Lead")
    sub_row = admin.register_agent(p["project_id"], "Sub", parent=lead_row["agent_id"])
    path = f"/{uuid.uuid4().hex}"
    receiver.behaviours[path] = lambda n: (503, b"") if n == 1 else (200, b"{}")
    hook_row = admin.register_agent(p["project_id"], "Hook",
                                    {"kind": "webhook", "url": receiver.url(path)})
    admin.register_agent(p["project_id"], "Lead")  # a namesake: `from` must stay exact
    lead, sub, hook = (faces.client(r["token"]) for r in (lead_row, sub_row, hook_row))
    lead_events = Events(faces, lead_row["token"])
    try:
        # A subagent writes to another session: it goes out under Lead's address.
        sent = sub.send("Hook", "Schema question", "# Which version?\n", topic="schema")
        assert (sent["from"], sent["via"]) == (lead_row["label"], sub_row["label"])
        did = sent["delivery"]["observations"][0]["delivery_id"]
        done = wait_until(lambda: (d := admin.delivery(did))["outcome"] and d,
                          what="the webhook's outcome")
        assert [a["outcome"] for a in done["attempts"]] == ["retry", "accepted"]

        (request,) = [r for r in receiver.requests(path) if r.headers["webhook-id"] == did][-1:]
        posted = Webhook(hook_row["transport"]["secret"]).verify(request.body, request.headers)
        same({"answer": sent, "GET as sender": sub.get_message(sent["id"]),
              "GET as root": lead.get_message(sent["id"]), "webhook": posted},
             (*MESSAGE_FIELDS, "via"))

        # The webhook's agent replies to `from`: it reaches Lead, on every face.
        answer = hook.send([posted["from"]], "Re: Schema question", "release seventeen")
        wait_until(lambda: lead_events.of("message", id=answer["id"]), what="the SSE message")
        (streamed,) = lead_events.of("message", id=answer["id"])
        (in_inbox,) = [m for m in lead.inbox()["messages"] if m["id"] == answer["id"]]
        wait_until(lambda: lead.search("seventeen")["messages"], what="the reply indexed")
        (found,) = lead.search("seventeen")["messages"]
        (in_thread,) = [m for m in lead.thread(answer["thread_id"]) if m["id"] == answer["id"]]
        mcp_inbox, mcp_found, mcp_delivery = over_mcp(faces, lead_row["token"], [
            ("fetch_inbox", {}), ("search_messages", {"q": "seventeen"}),
            ("get_delivery", {"delivery_id": did})])
        (mcp_in_inbox,) = [m for m in mcp_inbox["messages"] if m["id"] == answer["id"]]
        (cli_found,) = over_cli(faces, lead_row["token"], "search", "seventeen")["messages"]
        same({"answer": answer, "SSE": streamed, "inbox": in_inbox, "search": found,
              "thread": in_thread, "GET": lead.get_message(answer["id"]),
              "MCP fetch_inbox": mcp_in_inbox, "MCP search_messages": mcp_found["messages"][0],
              "CLI search --json": cli_found}, MESSAGE_FIELDS)
        assert streamed["from"] == hook_row["label"] and streamed["to"] == [lead_row["label"]]

        # The delivery of the subagent's send: one record, whoever reads it, and its
        # events (the root's) end at the same stage and outcome.
        final = wait_until(lambda: lead_events.of("delivery", delivery_id=did,
                                                  outcome="accepted"), what="the event")
        views = {"project": admin.delivery(did), "sender": sub.delivery(did),
                 "root": lead.delivery(did), "list": admin.message_deliveries(sent["id"])[0],
                 "MCP get_delivery": mcp_delivery,
                 "CLI delivery --json": over_cli(faces, p["token"], "delivery", did)}
        same(views, DELIVERY_FIELDS)
        shown = views["project"]
        assert final[-1]["stage"] == shown["stage"] and final[-1]["recipient"] == (
            hook_row["label"])
        last = shown["attempts"][-1]
        assert (shown["stages"]["dispatch_started"], shown["stages"]["provider_result_recorded"]
                ) == (last["started_ts"], last["ended_ts"])
        assert shown["attempts"][0]["error"] == "HTTP 503" and last["error"] is None
        assert posted["delivery_id"] == did
    finally:
        lead_events.stop.set()
        for c in (admin, lead, sub, hook):
            c.close()
        receiver.stop()
