"""Idempotency of sends and replies (docs/http-api.md, Sending: Idempotency), on the real stack.

"Nothing new stored" is checked in the store: every key of the project, found
with SCAN on its hash tag, is the same before and after a replay.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from messaging.store import keys
from tests.integration.conftest import Agent, Project
from tests.stack import Stack, project_state, wait_until

Json = dict[str, Any]
SEVEN_DAYS_S = 7 * 24 * 3600
CONCURRENT_SENDS = 20

def message_keys(stack: Stack, project_id: str) -> list[str]:
    """The keys of the project's stored messages."""
    with stack.redis() as r:
        return sorted(r.scan_iter(match=keys.message(project_id, "*"), count=1000))


def inbox(stack: Stack, project_id: str, agent: Agent) -> list[str]:
    """The delivery ids in an agent's inbox, read from the store (no observation recorded)."""
    with stack.redis() as r:
        return list(r.zrange(keys.inbox(project_id, agent.id), 0, -1))


def settled(project: Project, sender: Agent, sent: Json) -> None:
    """Wait until every delivery of a sent message has its transport outcome and the
    message is indexed for search (the store then changes only when asked)."""
    for obs in sent["delivery"]["observations"]:
        wait_until(lambda did=obs["delivery_id"]: sender.api.delivery(did)["outcome"],
                   what=f"the outcome of {obs['delivery_id']}")
    queue, claim = keys.search_queue(project.project_id), keys.search_claim(project.project_id)
    with project.stack.redis() as r:
        wait_until(lambda: r.llen(queue) == 0 and not r.exists(claim),
                   what="the message indexed for search")


def idem_key(project: Project, agent: Agent, key: str, operation: str = "send") -> str:
    """Where the store keeps an agent's idempotency record for ``key``."""
    return keys.idempotency(project.project_id, agent.id, operation, key)


def post(agent: Agent, body: Json) -> httpx.Response:
    """POST /v1/messages as the agent."""
    return agent.api.http.post("/v1/messages", json=body)


BODY = {"to": ["Bob"], "subject": "Handoff", "body_md": "# Next\n\nrun it\n",
        "idempotency_key": "handoff-1"}


def test_a_replay_returns_the_stored_message_and_stores_nothing_new(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    first = post(alice, BODY)
    assert first.status_code == 201 and first.json()["idempotent_replay"] is False
    settled(project, alice, first.json())
    before = project_state(project.stack, project.project_id)

    again = post(alice, BODY)

    assert again.status_code == 200
    replay = again.json()
    assert replay["idempotent_replay"] is True and replay["persisted"] is True
    assert replay == {**first.json(), "idempotent_replay": True}
    assert project_state(project.stack, project.project_id) == before
    assert len(inbox(project.stack, project.project_id, bob)) == 1


def test_a_replay_dispatches_nothing(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(**BODY)
    settled(project, alice, sent)
    for _ in range(3):
        assert post(alice, BODY).status_code == 200
    [obs] = sent["delivery"]["observations"]
    delivery = alice.api.delivery(obs["delivery_id"])
    assert [a["n"] for a in delivery["attempts"]] == [1]
    with project.stack.redis() as r:
        assert r.zscore(keys.due(project.project_id), obs["delivery_id"]) is None


def test_a_replay_shows_the_delivery_observations_as_they_were_at_admission(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(**BODY)
    settled(project, alice, sent)
    bob.api.inbox()  # the delivery is now observed
    [obs] = sent["delivery"]["observations"]
    assert alice.api.delivery(obs["delivery_id"])["stage"] == "delivery_observed"
    replay = alice.api.send(**BODY)
    assert replay["delivery"]["observations"] == sent["delivery"]["observations"]


def test_a_replay_does_not_resolve_the_recipients_again(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(**BODY)
    project.admin.retire_agent(project.project_id, bob.id)
    response = post(alice, BODY)
    assert response.status_code == 200 and response.json()["id"] == sent["id"]


@pytest.mark.parametrize("change", [{"subject": "Other"}, {"body_md": "# Next\n"},
                                    {"to": ["Carol"]}, {"cc": ["Carol"]},
                                    {"importance": "high"}, {"topic": "build"},
                                    {"thread_id": "started"}, {"notification_policy": "quiet"}])
def test_the_same_key_with_another_request_is_a_conflict_that_stores_nothing(
        project: Project, change: Json):
    alice, _, _ = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    if "thread_id" in change:  # a thread Alice takes part in: thread ids are the server's
        change = {"thread_id": alice.api.send("Bob", "Kickoff", "x")["thread_id"]}
    sent = alice.api.send(**BODY)
    settled(project, alice, sent)
    before = project_state(project.stack, project.project_id)
    response = post(alice, {**BODY, **change})
    assert response.status_code == 409, response.text
    assert response.json()["persisted"] is False
    assert response.json()["error"]["code"] == "IDEMPOTENCY_KEY_CONFLICT"
    assert project_state(project.stack, project.project_id) == before


def test_another_agent_may_use_the_same_key(project: Project):
    alice, carol, bob = project.agent("Alice"), project.agent("Carol"), project.agent("Bob")
    first, second = post(alice, BODY), post(carol, BODY)
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] != second.json()["id"]
    assert second.json()["from"] == carol.label
    wait_until(lambda: len(inbox(project.stack, project.project_id, bob)) == 2,
               what="both messages in Bob's inbox")


def test_a_reply_may_use_the_key_of_a_send(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = bob.api.send("Alice", "Question", "?", idempotency_key="k1")
    reply = alice.api.reply(sent["id"], "Answer", idempotency_key="k1")
    again = alice.api.send("Bob", "Question", "?", idempotency_key="k1")
    assert reply["idempotent_replay"] is False and again["idempotent_replay"] is False
    assert len({sent["id"], reply["id"], again["id"]}) == 3


def test_a_replayed_reply_returns_the_first_reply(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = bob.api.send("Alice", "Question", "?")
    first = alice.api.reply(sent["id"], "Answer", idempotency_key="r1")
    response = alice.api.http.post(f"/v1/messages/{sent['id']}/reply",
                                   json={"body_md": "Answer", "idempotency_key": "r1"})
    assert response.status_code == 200
    assert response.json()["idempotent_replay"] is True
    assert response.json()["id"] == first["id"]


def test_a_reply_to_another_message_with_the_same_key_is_a_conflict(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    one, two = bob.api.send("Alice", "One", "1"), bob.api.send("Alice", "Two", "2")
    alice.api.reply(one["id"], "Answer", idempotency_key="r1")
    response = alice.api.http.post(f"/v1/messages/{two['id']}/reply",
                                   json={"body_md": "Answer", "idempotency_key": "r1"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "IDEMPOTENCY_KEY_CONFLICT"


@pytest.mark.parametrize("variant", [
    {"importance": "normal"},
    {"ack_required": False},
    {"cc": [], "bcc": []},
    {"delivery_policy": "checked"},
    {"topic": None, "thread_id": None, "notification_policy": None},
    {"sender_name": "Alice"},
], ids=["importance", "ack_required", "cc-bcc", "delivery_policy", "nulls", "sender_name"])
def test_explicit_defaults_do_not_change_the_fingerprint(project: Project, variant: Json):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    first = alice.api.send(**BODY)
    response = post(alice, {**BODY, **variant})
    assert response.status_code == 200, response.text
    assert response.json()["id"] == first["id"]


def test_field_order_does_not_change_the_fingerprint(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    first = alice.api.send(**BODY, importance="high", topic="build")
    reordered = dict(reversed(list({**BODY, "importance": "high", "topic": "build"}.items())))
    raw = json.dumps(reordered)
    assert raw.index('"topic"') < raw.index('"to"')
    response = alice.api.http.post("/v1/messages", content=raw.encode(),
                                   headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.json()["id"] == first["id"]


def test_a_send_rejected_for_its_recipient_records_no_key(project: Project):
    alice = project.agent("Alice")
    refused = post(alice, BODY)
    assert refused.json()["error"]["code"] == "RECIPIENT_NOT_FOUND"
    with project.stack.redis() as r:
        assert not r.exists(idem_key(project, alice, BODY["idempotency_key"]))
    project.agent("Bob")
    retry = post(alice, BODY)
    assert retry.status_code == 201, retry.text
    assert retry.json()["idempotent_replay"] is False


@pytest.mark.parametrize(("bad", "code"), [
    ({"notification_policy": "quiet", "importance": "high"}, "QUIET_NOT_ALLOWED"),
    ({"sender_name": "Bob"}, "SENDER_MISMATCH"),
    ({"body_md": "x" * (1024 * 1024 + 1)}, "BODY_TOO_LARGE"),
])
def test_a_rejected_request_records_no_key_so_the_corrected_one_is_admitted(
        project: Project, bad: Json, code: str):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    refused = post(alice, {**BODY, **bad})
    assert refused.json()["error"]["code"] == code
    with project.stack.redis() as r:
        assert not r.exists(idem_key(project, alice, BODY["idempotency_key"]))
    retry = post(alice, BODY)  # another fingerprint than the refused one: no conflict
    assert retry.status_code == 201, retry.text


def test_the_idempotency_record_expires_after_seven_days(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    alice.api.send(**BODY)
    with project.stack.redis() as r:
        ttl = r.ttl(idem_key(project, alice, BODY["idempotency_key"]))
    assert SEVEN_DAYS_S - 60 < ttl <= SEVEN_DAYS_S


def test_nothing_but_the_idempotency_record_expires(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    thread_id = alice.api.send("Bob", "Kickoff", "x")["thread_id"]
    sent = alice.api.send(**BODY, thread_id=thread_id)
    settled(project, alice, sent)
    bob.api.mark_read(sent["id"])
    record = idem_key(project, alice, BODY["idempotency_key"])
    with project.stack.redis() as r:
        expiring = {k for k in r.scan_iter(match=keys.project(project.project_id)
                                           .removesuffix("project") + "*")
                    if r.ttl(k) != -1}
    assert expiring == {record}


def test_a_send_without_a_key_sent_twice_is_two_messages(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = {k: v for k, v in BODY.items() if k != "idempotency_key"}
    first, second = post(alice, body), post(alice, body)
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] != second.json()["id"]
    wait_until(lambda: len(inbox(project.stack, project.project_id, bob)) == 2,
               what="two messages in Bob's inbox")


def test_concurrent_identical_sends_admit_exactly_one_message(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    start = threading.Barrier(CONCURRENT_SENDS)
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    headers = {"authorization": f"Bearer {alice.row['token']}"}

    def send() -> None:
        with httpx.Client(base_url=project.stack.api_url, headers=headers, timeout=30) as http:
            http.get("/healthz")  # connect before the barrier, send together after it
            start.wait()
            response = http.post("/v1/messages", json=BODY)
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=send) for _ in range(CONCURRENT_SENDS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * (CONCURRENT_SENDS - 1) + [201], [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.json()["idempotent_replay"] for a in answers) == CONCURRENT_SENDS - 1
    assert len(message_keys(project.stack, project.project_id)) == 1
    wait_until(lambda: inbox(project.stack, project.project_id, bob), what="Bob's delivery")
    settled(project, alice, answers[0].json())
    assert len(inbox(project.stack, project.project_id, bob)) == 1
