"""Idle notices (docs/http-api.md: Idle notices) on the real store, API and worker.

One notice per subscription, exactly once: when the target goes idle or exits,
or ``expired`` when its time runs out; at once for a target already idle; after
the target's next idle when the subscription sent it a message. The notice is
a message from ``courier`` in the subscriber's inbox and an ``idle_notice``
event on its stream.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from messaging.client import CourierAPIError
from messaging.store import keys
from messaging.store.deliveries import DeliveryStore
from tests.integration.conftest import Agent, Project
from tests.stack import ROOT, project_state, wait_until

Json = dict[str, Any]
RACERS = 50


def stream_events(project: Project, agent: Agent, kind: str | None = None) -> list[Json]:
    """The agent's stream entries (data decoded), oldest first, read from the store."""
    with project.stack.redis() as r:
        entries = r.xrange(keys.events(project.project_id, agent.id))
    return [{"id": eid, "type": f["type"], **json.loads(f["data"])} for eid, f in entries
            if kind is None or f["type"] == kind]


def notices_in_inbox(agent: Agent, count: int) -> list[Json]:
    """Wait until the agent's inbox holds ``count`` messages from courier; those."""
    def found() -> list[Json] | None:
        mail = [m for m in agent.api.inbox(limit=500)["messages"] if m["from"] == "courier"]
        return mail if len(mail) >= count else None
    notices: list[Json] = wait_until(found, what=f"{count} idle notices for {agent.label}")
    return notices


def subscribe(agent: Agent, target: str, **fields: Any) -> Json:
    """POST /v1/subscriptions as the agent."""
    return agent.api.subscribe_idle(target, **fields)


def test_a_notice_is_never_offered_for_reply(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    subscribe(alice, "Bob")
    bob.api.set_presence("idle")
    (notice,) = notices_in_inbox(alice, 1)
    with pytest.raises(CourierAPIError) as refused:
        alice.api.reply(notice["id"], "thanks")
    assert (refused.value.status, refused.value.code) == (422, "INVALID_ARGUMENT")
    assert refused.value.details["field"] == "message_id"
    assert "notice" in str(refused.value)


def test_a_busy_target_going_idle_sends_one_notice_to_inbox_and_stream(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    sub = subscribe(alice, "Bob")
    assert (sub["state"], sub["target"], sub["outcome"]) == ("waiting", bob.label, None)

    bob.api.set_presence("idle")
    bob.api.set_presence("busy")
    bob.api.set_presence("idle")

    (notice,) = notices_in_inbox(alice, 1)
    assert notice["to"] == [alice.label] and notice["notification_policy"] == "wake"
    assert notice["idle_notice"] == {"subscription_id": sub["subscription_id"],
                                     "target": bob.label, "target_id": bob.id, "state": "idle"}
    assert bob.label in notice["subject"] and "idle" in notice["subject"]
    (event,) = stream_events(project, alice, "idle_notice")
    assert (event["state"], event["message_id"], event["subscription_id"]) == (
        "idle", notice["id"], sub["subscription_id"])
    done = alice.api.subscription(sub["subscription_id"])
    assert (done["state"], done["outcome"]) == ("notified", "idle")
    assert done["notice"]["message_id"] == notice["id"]


@pytest.mark.parametrize("state", ["idle", "exited"])
def test_a_target_already_idle_or_exited_is_notified_at_once(project: Project, state: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence(state)
    sub = subscribe(alice, bob.label)
    assert (sub["state"], sub["outcome"]) == ("notified", state)
    (notice,) = notices_in_inbox(alice, 1)
    assert notice["idle_notice"]["state"] == state
    assert [e["state"] for e in stream_events(project, alice, "idle_notice")] == [state]


def test_exiting_sends_the_notice_with_state_exited(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    sub = subscribe(alice, "Bob")
    bob.api.set_presence("exited")
    assert alice.api.subscription(sub["subscription_id"])["outcome"] == "exited"
    (notice,) = notices_in_inbox(alice, 1)
    assert "exited" in notice["subject"]


def test_a_message_goes_out_now_and_the_notice_waits_for_the_next_idle(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("idle")
    sub = subscribe(alice, "Bob", message={"subject": "Review auth.py", "body_md": "# Please\n"})
    sent = sub["message"]
    assert sub["state"] == "waiting" and sent["to"] == ["Bob"] and sent["from"] == alice.label
    assert [o["agent_id"] for o in sent["delivery"]["observations"]] == [bob.id]

    bob.api.set_presence("idle")  # still idle: not a new idle
    assert alice.api.subscription(sub["subscription_id"])["state"] == "waiting"
    bob.api.set_presence("busy")
    bob.api.set_presence("idle")

    (notice,) = notices_in_inbox(alice, 1)
    assert notice["thread_id"] == sent["thread_id"] and notice["in_reply_to"] == sent["id"]
    assert wait_until(lambda: [m["id"] for m in bob.api.inbox()["messages"]]) == [sent["id"]]


def test_a_retried_subscription_with_the_same_message_key_is_the_same_one(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    message = {"subject": "Handoff", "body_md": "x", "idempotency_key": "handoff-1"}
    first = subscribe(alice, "Bob", message=message)
    again = alice.api.http.post("/v1/subscriptions",
                                json={"target": "Bob", "kind": "idle", "message": message})
    assert again.status_code == 200
    assert again.json()["subscription_id"] == first["subscription_id"]
    assert again.json()["message"]["idempotent_replay"] is True


def test_one_notice_per_subscription_when_50_presence_reports_race(project: Project):
    bob = project.agent("Bob")
    watchers = [project.agent(name) for name in ("Alice", "Carol", "Dave")]
    bob.api.set_presence("busy")
    subs = [subscribe(w, "Bob") for w in watchers]
    states = ["idle", "busy", "exited"] * (RACERS // 3) + ["idle"] * (RACERS % 3)
    random.Random(4).shuffle(states)

    with ThreadPoolExecutor(max_workers=RACERS) as pool:
        answers = list(pool.map(bob.api.set_presence, states))

    assert {a["presence"] for a in answers} == {"idle", "busy", "exited"}
    for watcher, sub in zip(watchers, subs, strict=True):
        assert watcher.api.subscription(sub["subscription_id"])["state"] == "notified"
        notices = notices_in_inbox(watcher, 1)
        time.sleep(0.5)  # time for a second notice, were there one, to be delivered too
        assert len(notices_in_inbox(watcher, 1)) == len(notices) == 1
        assert len(stream_events(project, watcher, "idle_notice")) == 1


def test_a_subscription_whose_time_runs_out_gets_one_expired_notice(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    sub = subscribe(alice, "Bob", ttl_s=1)
    with project.stack.redis() as r:
        store = DeliveryStore(r)
        assert store.expire_subscriptions(project.project_id, time.time_ns() // 1_000_000) == 0
        time.sleep(1.1)
        store.expire_subscriptions(project.project_id, time.time_ns() // 1_000_000)
        assert store.expire_subscriptions(project.project_id, time.time_ns() // 1_000_000) == 0

    done = alice.api.subscription(sub["subscription_id"])
    assert (done["state"], done["outcome"]) == ("notified", "expired")
    bob.api.set_presence("idle")  # too late: the subscription is over
    (notice,) = notices_in_inbox(alice, 1)
    assert notice["idle_notice"]["state"] == "expired" and "expired" in notice["subject"]
    assert [e["state"] for e in stream_events(project, alice, "idle_notice")] == ["expired"]


def test_beat_sends_the_expired_notice_when_the_time_runs_out(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    sub = subscribe(alice, "Bob", ttl_s=1)
    # nothing here calls the expiry: the stack's beat runs the sweeper every 0.5 s
    (notice,) = notices_in_inbox(alice, 1)
    assert notice["idle_notice"]["state"] == "expired"
    assert alice.api.subscription(sub["subscription_id"])["outcome"] == "expired"


@pytest.mark.parametrize(("setup", "target", "code"), [
    (None, "Nobody", "RECIPIENT_NOT_FOUND"),
    ("retire", "Bob", "RECIPIENT_RETIRED"),
    ("source_lost", "Bob", "BOUND_SOURCE_LOST"),
])
def test_a_target_that_cannot_be_watched_is_refused_and_nothing_is_stored(
        project: Project, setup: str | None, target: str, code: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    if setup == "retire":
        project.admin.retire_agent(project.project_id, bob.id)
    elif setup == "source_lost":
        bob.api.set_presence("source_lost")
    before = project_state(project.stack, project.project_id)
    with pytest.raises(CourierAPIError) as caught:
        subscribe(alice, target)
    assert (caught.value.status, caught.value.code, caught.value.persisted) == (422, code, False)
    assert caught.value.details["recipients"][0]["to"] == target
    assert project_state(project.stack, project.project_id) == before


def test_a_message_refused_by_the_sending_rules_stores_no_subscription(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    before = project_state(project.stack, project.project_id)
    with pytest.raises(CourierAPIError) as caught:
        subscribe(alice, "Bob", message={"subject": "x", "importance": "urgent",
                                         "notification_policy": "quiet"})
    assert caught.value.code == "QUIET_NOT_ALLOWED"
    assert project_state(project.stack, project.project_id) == before


def test_notify_when_idle_and_watch_commands(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    env = {**os.environ, "COURIER_URL": project.stack.api_url, "COLUMNS": "200"}

    def courier(*args: str, token: str) -> str:
        done = subprocess.run([sys.executable, "-m", "messaging.cli", *args, "--token", token],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stderr + done.stdout
        return done.stdout

    assert "waiting for Bob" in courier("notify-when-idle", "Bob", token=alice.row["token"])
    assert "idle" in courier("presence", "idle", token=bob.row["token"])
    line = courier("watch", "--last-event-id", "0", "--count", "1", "--json",
                   token=alice.row["token"])
    event = json.loads(line)
    assert (event["event"], event["data"]["target"], event["data"]["state"]) == (
        "idle_notice", bob.label, "idle")


def test_a_subagent_cannot_subscribe_only_its_main_conversation_can(project: Project):
    lead, _ = project.agent("Lead"), project.agent("Bob")
    sub = project.agent("Sub", parent=lead.id)
    before = project_state(project.stack, project.project_id)
    for message in (None, {"subject": "Review", "body_md": "x"}):
        with pytest.raises(CourierAPIError) as caught:
            subscribe(sub, "Bob", message=message)
        assert (caught.value.status, caught.value.code, caught.value.persisted) == (
            422, "INVALID_ARGUMENT", False)
        assert "main conversation" in str(caught.value)
    assert project_state(project.stack, project.project_id) == before
    assert subscribe(lead, "Bob")["notice_to"] == "you"


def test_a_subscriber_that_holds_peer_mail_has_its_notice_held_for_its_user(project: Project):
    watcher, bob = project.agent("Watcher", inbound="hold"), project.agent("Bob")
    bob.api.set_presence("busy")
    sub = subscribe(watcher, "Bob")
    assert sub["notice_to"] == "your_user"
    bob.api.set_presence("idle")
    assert watcher.api.subscription(sub["subscription_id"])["outcome"] == "idle"

    (held,) = wait_until(lambda: project.admin.held(project.project_id), what="the held notice")
    assert (held["message"]["from"], held["held"]) == ("courier", True)
    assert held["message"]["idle_notice"]["subscription_id"] == sub["subscription_id"]
    time.sleep(1.0)  # the outbox grace would have published it by now, were it not held
    assert watcher.api.inbox()["messages"] == []
    assert stream_events(project, watcher, "idle_notice") == []

    project.admin.release(held["delivery_id"])
    (notice,) = notices_in_inbox(watcher, 1)
    assert notice["id"] == held["message"]["id"]


def test_a_pure_subscription_costs_the_target_nothing(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    sub = subscribe(alice, "Bob")
    assert (sub["state"], sub["message"], sub["notice_to"]) == ("waiting", None, "you")
    bob.api.set_presence("idle")
    notices_in_inbox(alice, 1)
    assert bob.api.inbox()["messages"] == []
    assert stream_events(project, bob) == []


@pytest.mark.parametrize("message", [{}, {"body_md": ""}, {"body_md": "  \n"},
                                     {"body_md": "", "importance": "high"}])
def test_a_message_without_text_sends_nothing_and_subscribes_purely(
        project: Project, message: Json):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("busy")
    sub = subscribe(alice, "Bob", message=message)
    assert (sub["state"], sub["message"]) == ("waiting", None)
    bob.api.set_presence("idle")
    notices_in_inbox(alice, 1)
    assert bob.api.inbox()["messages"] == []
    assert stream_events(project, bob) == []
