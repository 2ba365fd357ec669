"""Held mail: mail from other agents to an agent registered with `inbound: hold`
waits for the project's human, who releases or declines it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from messaging.client import CourierAPIError
from tests.integration.conftest import Agent, Project
from tests.receiver import Receiver
from tests.stack import Stack, wait_until

Json = dict[str, Any]
# Long enough for the sweeper (every 0.5 s) and the outbox grace (2 s) to have
# published anything they were going to.
SETTLE_S = 3.5


def held(project: Project) -> list[Json]:
    rows: list[Json] = project.admin.request(
        "GET", f"/v1/projects/{project.project_id}/held")["deliveries"]
    return rows


def settle(project: Project, delivery_id: str, action: str) -> Json:
    return project.admin.request("POST", f"/v1/deliveries/{delivery_id}/{action}")


def send_held(alice: Agent, to: str, subject: str = "Plan") -> str:
    sent = alice.api.send(to, subject, "x")
    (obs,) = sent["delivery"]["observations"]
    assert obs["held"] is True and obs["stage"] == "target_selected"
    assert any("held" in w for w in sent["delivery"]["warnings"])
    return str(obs["delivery_id"])


def invisible(agent: Agent, message_id: str, delivery_id: str) -> None:
    """The recipient can find the message nowhere."""
    assert agent.api.inbox()["messages"] == []
    with pytest.raises(CourierAPIError) as e:
        agent.api.get_message(message_id)
    assert e.value.status == 404
    with pytest.raises(CourierAPIError):
        agent.api.delivery(delivery_id)


def test_held_mail_is_listed_and_never_visible_before_release(project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    did = send_held(alice, "Guarded", "First")
    send_held(alice, "Guarded", "Second")
    time.sleep(SETTLE_S)
    rows = held(project)
    assert [r["message"]["subject"] for r in rows] == ["First", "Second"]
    assert rows[0]["held"] is True and rows[0]["stage"] == "target_selected"
    assert "dispatch_started" not in rows[0]["stages"]
    mid = rows[0]["message_id"]
    invisible(guarded, mid, did)
    view = alice.api.delivery(did)
    assert view["held"] is True and view["outcome"] is None


def test_a_held_message_stays_out_of_the_recipient_s_thread_view(project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    sent = alice.api.send("Guarded", "Open", "x")
    with pytest.raises(CourierAPIError) as e:
        guarded.api.thread(sent["thread_id"])
    assert e.value.status == 404
    settle(project, sent["delivery"]["observations"][0]["delivery_id"], "release")
    assert [m["id"] for m in guarded.api.thread(sent["thread_id"])] == [sent["id"]]


def test_released_mail_is_delivered_once(project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    did = send_held(alice, "Guarded")
    view = settle(project, did, "release")
    assert view["held"] is False
    got = wait_until(lambda: guarded.api.inbox()["messages"], what="the released mail")
    assert [m["delivery_id"] for m in got] == [did]
    time.sleep(SETTLE_S)
    assert len(guarded.api.inbox()["messages"]) == 1
    final = alice.api.delivery(did)
    assert final["outcome"] == "accepted" and len(final["attempts"]) == 1
    assert held(project) == []
    with pytest.raises(CourierAPIError) as e:
        settle(project, did, "release")
    assert e.value.status == 409


def test_declined_mail_is_rejected_and_never_shown(project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    did = send_held(alice, "Guarded")
    mid = alice.api.delivery(did)["message_id"]
    view = settle(project, did, "decline")
    assert view["outcome"] == "rejected" and view["held"] is False
    assert view["error"] == "declined by the recipient's user"
    assert "dispatch_started" not in view["stages"]
    time.sleep(SETTLE_S)
    invisible(guarded, mid, did)
    assert held(project) == []


def test_held_mail_is_not_sent_over_a_webhook_before_release(
        project: Project, stack: Stack):
    receiver = Receiver()
    receiver.start()
    try:
        stack.start_worker(queues="deliver.webhook", concurrency=1, beat=False)
        alice = project.agent("Alice")
        project.agent("Hooked", inbound="hold",
                      transport={"kind": "webhook", "url": receiver.url("/hook")})
        did = send_held(alice, "Hooked")
        time.sleep(SETTLE_S)
        assert receiver.count("/hook") == 0
        settle(project, did, "release")
        wait_until(lambda: receiver.count("/hook"), what="the released webhook")
        assert [r.headers["webhook-id"] for r in receiver.requests("/hook")] == [did]
    finally:
        receiver.stop()


def test_an_agent_s_own_mail_is_not_held(project: Project):
    guarded = project.agent("Guarded", inbound="hold")
    sent = guarded.api.send("Guarded", "Note to self", "x")
    assert sent["delivery"]["observations"][0]["held"] is False
    # (Idle notices to an agent that holds peer mail are held: test_idle_notices.py.)


def test_only_the_project_token_releases(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    did = send_held(alice, "Guarded")
    with pytest.raises(CourierAPIError) as e:
        alice.api.request("POST", f"/v1/deliveries/{did}/release")
    assert e.value.status == 403


def test_an_mcp_send_says_the_mail_is_held(project: Project):
    import asyncio

    from tests.integration.test_mcp import mcp

    alice, _ = project.agent("Alice"), project.agent("Guarded", inbound="hold")

    async def scenario() -> Json:
        async with mcp(project, alice) as tools:
            return await tools("send", to="Guarded", message="Please merge")

    sent = asyncio.run(scenario())
    assert sent["delivery"]["observations"][0]["held"] is True
    assert any("held" in w for w in sent["delivery"]["warnings"])


def test_held_mail_is_not_redriven_but_released(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    did = send_held(alice, "Guarded")
    with pytest.raises(CourierAPIError) as e:
        project.admin.redrive(did)
    assert e.value.status == 409 and e.value.code == "DELIVERY_NOT_REDRIVABLE"
    assert e.value.details["reason"] == "held" and "release it" in str(e.value)
    assert alice.api.delivery(did)["held"] is True


def test_a_held_recipient_finds_its_held_mail_on_no_route(project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    sent = alice.api.send("Guarded", "Secret plan", "x", topic="plans")
    (obs,) = sent["delivery"]["observations"]
    mid, did = sent["id"], obs["delivery_id"]
    time.sleep(SETTLE_S)
    invisible(guarded, mid, did)
    http = guarded.api.http
    routes = {
        "observed": http.post(f"/v1/deliveries/{did}/observed"),
        "delivery": http.get(f"/v1/deliveries/{did}"),
        "deliveries": http.get(f"/v1/messages/{mid}/deliveries"),
        "message": http.get(f"/v1/messages/{mid}"),
        "thread": http.get(f"/v1/threads/{sent['thread_id']}"),
        "read": http.post(f"/v1/messages/{mid}/read"),
        "ack": http.post(f"/v1/messages/{mid}/ack"),
        "reply": http.post(f"/v1/messages/{mid}/reply", json={"body_md": "got it"}),
        "post in its thread": http.post("/v1/messages", json={
            "to": ["Alice"], "subject": "About your plan", "body_md": "x",
            "thread_id": sent["thread_id"]}),
    }
    statuses = {route: got.status_code for route, got in routes.items()}
    assert statuses == dict.fromkeys(routes, 404), statuses
    assert all("Secret plan" not in got.text for got in routes.values())
    assert guarded.api.search("Secret")["messages"] == []
    assert guarded.api.search(topic="plans")["messages"] == []
    # nothing of it was observed or read on the recipient's side
    view = alice.api.delivery(did)
    assert view["held"] is True and view["observed_ts"] is None
    assert "delivery_observed" not in view["stages"]
    # its event stream, replayed from the start, shows the agent's own note and
    # not the held mail; released, every route shows it, the stream too
    note = guarded.api.send("Guarded", "Note to self", "x")
    wait_until(lambda: guarded.api.inbox()["messages"], what="the note")
    events = guarded.api.events("0", read_timeout_s=30)
    subjects = (e.data["subject"] for e in events if e.event == "message")
    assert next(subjects) == note["subject"]
    settle(project, did, "release")
    assert next(subjects) == "Secret plan"
    events.close()
    wait_until(lambda: len(guarded.api.inbox()["messages"]) == 2, what="the released mail")
    assert guarded.api.observed(did)["delivery_id"] == did
    assert guarded.api.get_message(mid)["subject"] == "Secret plan"
