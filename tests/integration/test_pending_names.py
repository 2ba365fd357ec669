"""Names not yet registered: mail admitted for an authorized name waits for its
first agent, is bound by that registration, or fails when the name runs out."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from messaging.client import CourierAPIError
from tests.integration.conftest import Agent, Project
from tests.stack import project_state, wait_until

Json = dict[str, Any]


def allow(project: Project, name: str, **body: Any) -> Json:
    return project.admin.request("PUT", f"/v1/projects/{project.project_id}/names/{name}",
                                 json=body)


def names(project: Project) -> list[Json]:
    rows: list[Json] = project.admin.request(
        "GET", f"/v1/projects/{project.project_id}/names")["names"]
    return rows


def delivery_events(sender: Agent, delivery_id: str, count: int) -> list[Json]:
    """The first ``count`` `delivery` events of the sender's stream about one delivery."""
    found: list[Json] = []
    for event in sender.api.events(last_event_id="0-0"):
        if event.event == "delivery" and event.data["delivery_id"] == delivery_id:
            found.append(event.data)
            if len(found) == count:
                return found
    return found


def test_a_send_to_an_authorized_name_is_admitted_with_a_pending_target(project: Project):
    alice = project.agent("Alice")
    auth = allow(project, "Reviewer", ttl_s=600)
    sent = alice.api.send("Reviewer", "Review", "x")
    (obs,) = sent["delivery"]["observations"]
    assert obs["agent_id"] is None and obs["stage"] == "admitted"
    assert obs["target"] == "pending" and obs["recipient"] == "Reviewer"
    assert any(auth["expires_ts"] in w for w in sent["delivery"]["warnings"])
    view = alice.api.delivery(obs["delivery_id"])
    assert view["target"] == "pending" and view["agent_id"] is None
    assert view["stage"] == "admitted" and "target_selected" not in view["stages"]
    assert names(project) == [{"name": "Reviewer", "expires_ts": auth["expires_ts"],
                               "waiting": 1}]


def test_registration_binds_waiting_mail_after_admission_and_delivers_it_in_order(
        project: Project):
    alice = project.agent("Alice")
    allow(project, "Reviewer")
    dids = [alice.api.send("Reviewer", f"Review {i}", "x")["delivery"]["observations"][0][
        "delivery_id"] for i in range(3)]
    time.sleep(0.05)
    reviewer = project.agent("Reviewer")
    for did in dids:
        view = wait_until(lambda d=did: (v := alice.api.delivery(d))["outcome"] and v)
        assert view["agent_id"] == reviewer.id and view["target"] == "pinned"
        assert view["stages"]["target_selected"] > view["stages"]["admitted"]
        assert view["recipient"] == reviewer.label and view["outcome"] == "accepted"
    subjects = [m["subject"] for m in reviewer.api.inbox()["messages"]]
    assert subjects == ["Review 0", "Review 1", "Review 2"]
    assert names(project) == []


def test_the_sender_hears_of_the_binding_over_its_event_stream(project: Project):
    alice = project.agent("Alice")
    allow(project, "Reviewer")
    did = alice.api.send("Reviewer", "Review", "x")["delivery"]["observations"][0]["delivery_id"]
    reviewer = project.agent("Reviewer")
    events = delivery_events(alice, did, 2)
    assert events[0]["stage"] == "target_selected" and events[0]["agent_id"] == reviewer.id
    assert events[1]["outcome"] == "accepted"


def test_expiry_ends_waiting_mail_failed_without_dispatch(project: Project):
    alice = project.agent("Alice")
    allow(project, "Ghost", ttl_s=1)
    did = alice.api.send("Ghost", "Hello", "x")["delivery"]["observations"][0]["delivery_id"]
    view = wait_until(lambda: (v := alice.api.delivery(did))["outcome"] and v, timeout_s=15)
    assert view["outcome"] == "failed" and view["stage"] == "provider_result_recorded"
    assert "dispatch_started" not in view["stages"] and view["attempts"] == []
    assert "no agent registered" in view["error"]
    assert names(project) == []
    late = project.agent("Ghost")  # too late: nothing is bound
    time.sleep(1)
    assert late.api.inbox()["messages"] == []
    assert alice.api.delivery(did)["outcome"] == "failed"


def test_deleting_a_name_ends_its_waiting_mail_failed(project: Project):
    alice = project.agent("Alice")
    allow(project, "Ghost")
    did = alice.api.send("Ghost", "Hello", "x")["delivery"]["observations"][0]["delivery_id"]
    project.admin.request("DELETE", f"/v1/projects/{project.project_id}/names/Ghost")
    view = alice.api.delivery(did)
    assert view["outcome"] == "failed" and "dispatch_started" not in view["stages"]
    assert "no agent registered" in view["error"]
    assert [e["outcome"] for e in delivery_events(alice, did, 1)] == ["failed"]
    with pytest.raises(CourierAPIError) as e:
        alice.api.send("Ghost", "Again", "x")
    assert e.value.body["error"]["code"] == "RECIPIENT_NOT_FOUND"


def test_a_name_that_was_registered_before_is_not_pending(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    project.admin.retire_agent(project.project_id, bob.id)
    allow(project, "Bob")
    before = project_state(project.stack, project.project_id)
    with pytest.raises(CourierAPIError) as e:
        alice.api.send("Bob", "Hello", "x")
    assert e.value.body["error"]["code"] == "RECIPIENT_RETIRED"
    assert project_state(project.stack, project.project_id) == before


@pytest.mark.parametrize(("name", "body"), [
    ("main", {}), ("agt_x", {}), ("Ok", {"ttl_s": 0}), ("Ok", {"ttl_s": 7 * 24 * 3600 + 1}),
    ("Ok", {"ttl": 5}),
])
def test_a_bad_authorization_is_invalid_argument(project: Project, name: str, body: Json):
    with pytest.raises(CourierAPIError) as e:
        allow(project, name, **body)
    assert e.value.status == 422 and e.value.body["error"]["code"] == "INVALID_ARGUMENT"
    assert names(project) == []


def test_only_the_project_token_authorizes_names(project: Project):
    alice = project.agent("Alice")
    with pytest.raises(CourierAPIError) as e:
        alice.api.request("PUT", f"/v1/projects/{project.project_id}/names/X", json={})
    assert e.value.status == 403


def test_fifty_sends_racing_the_registration_are_each_bound_exactly_once(project: Project):
    senders = [project.agent(f"Sender{i}") for i in range(5)]
    allow(project, "Target")
    start = threading.Barrier(51)
    registered: list[Agent] = []

    def send(i: int) -> str:
        start.wait()
        sent = senders[i % 5].api.send("Target", f"Race {i}", "x")
        return str(sent["delivery"]["observations"][0]["delivery_id"])

    def register() -> None:
        start.wait()
        time.sleep(0.01)
        registered.append(project.agent("Target"))

    with ThreadPoolExecutor(51) as pool:
        reg = pool.submit(register)
        dids = list(pool.map(send, range(50)))
        reg.result()
    (target,) = registered
    for did in dids:
        view = wait_until(lambda d=did: (v := project.admin.delivery(d))["outcome"] and v)
        assert view["agent_id"] == target.id and view["outcome"] == "accepted"
        assert view["stages"]["target_selected"] >= view["stages"]["admitted"]
        assert len(view["attempts"]) == 1
    inbox = target.api.inbox(limit=500)["messages"]
    assert sorted(m["delivery_id"] for m in inbox) == sorted(dids)
    assert len({m["subject"] for m in inbox}) == 50


def test_mail_waiting_for_a_name_is_not_redriven(project: Project):
    alice = project.agent("Alice")
    allow(project, "Later")
    did = alice.api.send("Later", "Soon", "x")["delivery"]["observations"][0]["delivery_id"]
    with pytest.raises(CourierAPIError) as e:
        project.admin.redrive(did)
    assert e.value.status == 409 and e.value.code == "DELIVERY_NOT_REDRIVABLE"
    assert e.value.details["reason"] == "pending"
    assert alice.api.delivery(did)["target"] == "pending"
