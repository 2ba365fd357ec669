"""Records that only serve a moment go with it: subscriptions, notice threads, streams."""

from __future__ import annotations

from messaging.store import keys
from tests.integration.conftest import Project
from tests.stack import project_state, wait_until


def test_an_idle_notice_leaves_no_stray_keys_and_its_subscription_expires(
    project: Project,
) -> None:
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("idle")
    sub = alice.api.subscribe_idle("Bob")
    assert sub["state"] == "notified"
    notice = sub["notice"]
    wait_until(lambda: project.admin.delivery(notice["delivery_id"])["outcome"] == "accepted",
               what="the notice's delivery")
    pid = project.project_id
    state = project_state(project.stack, pid)
    # A notice that starts its own thread has no thread set, as any such message.
    assert keys.thread(pid, notice["message_id"]) not in state
    # Nobody reads the stream of `courier`, so nothing writes to it.
    assert keys.events(pid, "courier") not in state
    # The subscription stays readable for a while after its notice, then expires.
    with project.stack.redis() as r:
        ttl_s = r.ttl(keys.subscription(pid, sub["subscription_id"]))
    assert keys.SUBSCRIPTION_KEEP_S - 60 < ttl_s <= keys.SUBSCRIPTION_KEEP_S
    assert alice.api.subscription(sub["subscription_id"])["state"] == "notified"


def test_event_entries_carry_ids_not_copies_of_the_message(project: Project) -> None:
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = "# A long body\n\n" + "word " * 2000
    sent = alice.api.send(["Bob"], "Big", body)
    did = sent["delivery"]["observations"][0]["delivery_id"]
    wait_until(lambda: project.admin.delivery(did)["outcome"] == "accepted", what="delivery")
    with project.stack.redis() as r:
        entries = r.xrange(keys.events(project.project_id, bob.id))
    assert entries and all(len(f["data"]) < 300 for _, f in entries)
    assert any(sent["id"] in f["data"] for _, f in entries)
