"""Admission rules (docs/http-api.md, Sending), on the real stack.

Every rejection is checked twice: the answer (status, code, ``persisted: false``)
and the store itself, where a rejected send must leave every key of the project
as it was: no message, no delivery, no idempotency record, no inbox entry.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from messaging.store import keys
from tests.integration.conftest import Agent, Project
from tests.stack import Stack, project_state, wait_until

Json = dict[str, Any]
MIB = 1024 * 1024

@dataclass
class Shared:
    """A project with Alice, Bob and Carol, and a second project with its agent Mallory."""

    project: Project
    alice: Agent
    bob: Agent
    other_token: str
    mallory_token: str


@pytest.fixture(scope="module")
def shared(stack: Stack) -> Iterator[Shared]:
    """One project for the tests whose sends are all rejected: they store nothing."""
    with stack.operator() as op:
        mine = op.create_project(f"/srv/checkouts/{uuid.uuid4().hex}")
        other = op.create_project(f"/srv/checkouts/{uuid.uuid4().hex}")
    project = Project(stack, mine["project_id"], mine["project_key"], mine["token"])
    try:
        alice, bob = project.agent("Alice"), project.agent("Bob")
        project.agent("Carol")
        mallory = project.client(other["token"]).register_agent(other["project_id"], "Mallory")
        yield Shared(project, alice, bob, other["token"], mallory["token"])
    finally:
        for c in project.clients:
            c.close()


def post(agent: Agent, body: Any) -> httpx.Response:
    """POST /v1/messages as the agent, whatever the body."""
    return agent.api.http.post("/v1/messages", json=body)


def rejected(project: Project, agent: Agent, body: Any, status: int, code: str) -> Json:
    """Send; assert the rejection and that the store did not change. The error object."""
    before = project_state(project.stack, project.project_id)
    response = post(agent, body)
    assert response.status_code == status, response.text
    answer = response.json()
    assert answer["persisted"] is False
    assert answer["error"]["code"] == code
    assert project_state(project.stack, project.project_id) == before
    error: Json = answer["error"]
    return error


def msg(to: Any, **fields: Any) -> Json:
    """A valid send body to ``to`` unless fields say otherwise."""
    return {"to": to if isinstance(to, list) else [to], "subject": "Handoff",
            "body_md": "# Next\n", **fields}


def notice(**fields: Any) -> Json:
    """A valid resource notice."""
    return {"resource_id": "gpu-0", "phase_id": "phase.2", "state": "released",
            "next_action": "none", **fields}


def test_unknown_recipients_are_all_listed_with_close_names(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    error = rejected(project, alice, msg(["Bobb", "Bob", "Carlo"], cc=["bob"]), 422,
                     "RECIPIENT_NOT_FOUND")
    failing = error["details"]["recipients"]
    assert [(f["to"], f["reason"]) for f in failing] == [
        ("Bobb", "not_found"), ("Carlo", "not_found"), ("bob", "not_found")]
    assert failing[0]["suggestions"] == ["Bob"]
    assert failing[1]["suggestions"] == []
    assert failing[2]["suggestions"] == ["Bob"]


def test_a_suggested_name_several_agents_hold_is_suggested_as_each_ones_label(
        project: Project):
    alice, first, second = project.agent("Alice"), project.agent("Bob"), project.agent("Bob")
    project.agent("Carol")
    error = rejected(project, alice, msg(["Bobb", "Carl"]), 422, "RECIPIENT_NOT_FOUND")
    bobb, carl = error["details"]["recipients"]
    assert bobb["suggestions"] == [first.label, second.label]
    assert carl["suggestions"] == ["Carol"]  # one agent holds it: the bare name reaches it


@pytest.mark.parametrize("length", [65, 84, 85, 300])
def test_a_recipient_of_up_to_300_characters_no_agent_has_is_recipient_not_found(
        project: Project, length: int):
    alice = project.agent("Alice")
    for to in ("n" * length, "n" * (length - 9) + " [abcdef]"):
        error = rejected(project, alice, msg(to), 422, "RECIPIENT_NOT_FOUND")
        assert error["details"]["recipients"] == [
            {"to": to, "reason": "not_found", "reason_code": "RECIPIENT_NOT_FOUND",
             "suggestions": []}]


def test_a_recipient_over_300_characters_is_a_recipient_error_beside_the_others(
        project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    error = rejected(project, alice, msg(["Bob", "n" * 5000, "Nobody"]), 422,
                     "RECIPIENT_NOT_FOUND")
    failing = error["details"]["recipients"]
    assert [(f["to"], f["reason"]) for f in failing] == [
        ("n" * 300 + "…", "too_long"), ("Nobody", "not_found")]
    assert "longer than 300 characters" in error["message"]


@pytest.mark.parametrize("form", ["wrong name for a ref", "unknown ref", "unknown agent id",
                                  "agent id of another project"])
def test_an_exact_address_that_matches_no_agent_is_recipient_not_found(project: Project,
                                                                       form: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    with project.stack.operator() as op:
        other_project = op.create_project(project.project_key + "-other")
    stranger = project.client(other_project["token"]).register_agent(
        other_project["project_id"], "Bob")
    address = {
        "wrong name for a ref": f"Carol [{bob.row['ref']}]",
        "unknown ref": "Bob [000000]" if bob.row["ref"] != "000000" else "Bob [ffffff]",
        "unknown agent id": bob.id[:-4] + ("0000" if not bob.id.endswith("0000") else "ffff"),
        "agent id of another project": stranger["agent_id"],
    }[form]
    error = rejected(project, alice, msg(address), 422, "RECIPIENT_NOT_FOUND")
    assert error["details"]["recipients"][0]["to"] == address


@pytest.mark.parametrize("form", ["name", "label", "agent_id"])
@pytest.mark.parametrize(("action", "code", "reason"), [
    ("retire", "RECIPIENT_RETIRED", "retired"), ("close", "RECIPIENT_CLOSED", "closed")])
def test_an_agent_that_is_retired_or_closed_takes_no_new_mail(
        project: Project, form: str, action: str, code: str, reason: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    getattr(project.admin, f"{action}_agent")(project.project_id, bob.id)
    address = {"name": "Bob", "label": bob.label, "agent_id": bob.id}[form]
    error = rejected(project, alice, msg(address), 422, code)
    assert error["details"]["recipients"] == [
        {"to": address, "reason": reason, "reason_code": code}]


def test_a_bare_name_skips_a_retired_namesake_for_a_live_older_one(project: Project):
    alice, older = project.agent("Alice"), project.agent("Bob")
    newer = project.agent("Bob")
    project.admin.retire_agent(project.project_id, newer.id)
    sent = alice.api.send("Bob", "Handoff", "x")
    assert [o["agent_id"] for o in sent["delivery"]["observations"]] == [older.id]


def test_a_recipient_whose_source_is_lost_is_refused_until_presence_changes(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("source_lost")
    error = rejected(project, alice, msg("Bob"), 422, "BOUND_SOURCE_LOST")
    assert error["details"]["recipients"] == [
        {"to": "Bob", "reason": "bound_source_lost", "reason_code": "BOUND_SOURCE_LOST"}]
    bob.api.set_presence("idle")
    assert post(alice, msg("Bob")).status_code == 201


def test_a_bare_name_prefers_a_live_older_agent_over_a_newer_one_that_lost_its_source(
        project: Project):
    alice, older = project.agent("Alice"), project.agent("Bob")
    newer = project.agent("Bob")
    newer.api.set_presence("source_lost")
    sent = alice.api.send("Bob", "Handoff", "x")
    assert [o["agent_id"] for o in sent["delivery"]["observations"]] == [older.id]


def test_a_bare_name_whose_every_agent_lost_its_source_is_refused(project: Project):
    alice, older = project.agent("Alice"), project.agent("Bob")
    newer = project.agent("Bob")
    newer.api.set_presence("source_lost")
    older.api.set_presence("source_lost")
    error = rejected(project, alice, msg("Bob"), 422, "BOUND_SOURCE_LOST")
    assert [f["reason"] for f in error["details"]["recipients"]] == ["bound_source_lost"]


def test_an_exited_recipient_still_gets_mail_with_a_warning(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob.api.set_presence("exited")
    sent = alice.api.send("Bob", "Handoff", "x")
    assert sent["delivery"]["observations"][0]["presence"] == "exited"
    assert any(bob.label in w and "exited" in w for w in sent["delivery"]["warnings"])


@pytest.mark.parametrize("fields", [{"importance": "high"}, {"importance": "urgent"},
                                    {"ack_required": True}])
def test_quiet_is_refused_for_loud_messages(shared: Shared, fields: Json):
    project, alice = shared.project, shared.alice
    error = rejected(project, alice, msg("Bob", notification_policy="quiet", **fields), 422,
                     "QUIET_NOT_ALLOWED")
    assert error["details"]["field"] == "notification_policy"


@pytest.mark.parametrize("importance", ["low", "normal"])
def test_quiet_is_kept_for_low_and_normal_messages(project: Project, importance: str):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "FYI", "x", importance=importance, notification_policy="quiet")
    assert sent["notification_policy"] == "quiet"


@pytest.mark.parametrize(("recipients", "code"), [
    (["Lost", "Closed", "Retired", "Ghost"], "RECIPIENT_NOT_FOUND"),
    (["Lost", "Closed", "Retired"], "RECIPIENT_RETIRED"),
    (["Lost", "Closed"], "RECIPIENT_CLOSED"),
    (["Lost"], "BOUND_SOURCE_LOST"),
])
def test_the_error_code_is_the_first_failing_reason_in_table_order(
        project: Project, recipients: list[str], code: str):
    alice = project.agent("Alice")
    project.agent("Lost").api.set_presence("source_lost")
    for name, action in (("Closed", "close_agent"), ("Retired", "retire_agent")):
        getattr(project.admin, action)(project.project_id, project.agent(name).id)
    # quiet with ack would be QUIET_NOT_ALLOWED, last in the table: recipients come first
    error = rejected(project, alice, msg(recipients, notification_policy="quiet",
                                         ack_required=True), 422, code)
    assert [f["to"] for f in error["details"]["recipients"]] == recipients


@pytest.mark.parametrize("fields", [{"sender_name": "Bob"}, {"sender_name": "alice"},
                                    {"project_key": "/srv/checkouts/elsewhere"}])
def test_a_body_that_names_another_sender_is_sender_mismatch(shared: Shared, fields: Json):
    project, alice = shared.project, shared.alice
    rejected(project, alice, msg("Bob", **fields), 403, "SENDER_MISMATCH")


def test_a_body_that_names_the_token_s_own_sender_is_admitted(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Handoff", "x", sender_name="Alice",
                          project_key=project.project_key)
    assert sent["from"] == alice.label and sent["sender_id"] == alice.id
    assert sent["sender_name"] == "Alice"
    assert sent["sender_location"]["project_key"] == project.project_key


@pytest.mark.parametrize(("body", "field"), [
    (msg("Bob", priority="high"), "priority"),
    (msg("Bob", resource_notice=notice(extra=1)), "resource_notice.extra"),
    ({**msg("Bob"), "to": "Bob"}, "to"),
    ({**msg("Bob"), "to": [7]}, "to.0"),
    (msg(["Bob", None]), "to.1"),
    (msg("Bob", cc="Bob"), "cc"),
    ({**msg("Bob"), "subject": 5}, "subject"),
    ({**msg("Bob"), "body_md": ["x"]}, "body_md"),
    (msg("Bob", importance="critical"), "importance"),
    (msg("Bob", importance=1), "importance"),
    (msg("Bob", ack_required="yes"), "ack_required"),
    (msg("Bob", ack_required=1), "ack_required"),
    (msg("Bob", notification_policy="loud"), "notification_policy"),
    (msg("Bob", delivery_policy="fast"), "delivery_policy"),
    (msg("Bob", idempotency_key=12), "idempotency_key"),
    (msg("Bob", resource_notice="gpu-0"), "resource_notice"),
    ({"subject": "Handoff"}, "to"),
    ([msg("Bob")], "body"),
    ("Bob", "body"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_malformed_field_is_invalid_argument_naming_it(shared: Shared, body: Any, field: str):
    project, alice = shared.project, shared.alice
    error = rejected(project, alice, body, 422, "INVALID_ARGUMENT")
    assert error["details"]["field"] == field


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"to": ["Bob"], "subject": "Handoff"', "body"),
    (b"", "body"),
    (b"null", "body"),
    (b"[]", "body"),
    (b"42", "body"),
    (b'{"to": ["Bob"], "subject": "Handoff", "body_md": "\\ud800"}', "body_md"),
    (b'{"to": ["Bob"], "subject": "\\udfff x"}', "subject"),
])
def test_a_body_that_is_not_json_or_not_text_is_invalid_argument(
        shared: Shared, raw: bytes, field: str):
    project, alice = shared.project, shared.alice
    before = project_state(project.stack, project.project_id)
    response = alice.api.http.post("/v1/messages", content=raw,
                                   headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert response.json()["error"]["details"]["field"] == field
    assert project_state(project.stack, project.project_id) == before


def test_a_body_that_is_not_utf8_is_invalid_argument(shared: Shared):
    project, alice = shared.project, shared.alice
    before = project_state(project.stack, project.project_id)
    response = alice.api.http.post("/v1/messages", content=b'{"to": ["\xff"], "subject": "x"}',
                                   headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert project_state(project.stack, project.project_id) == before


@pytest.mark.parametrize(("counts", "field"), [
    ((101, 0, 0), "to"), ((60, 41, 0), "cc"), ((50, 0, 51), "bcc"), ((40, 30, 31), "bcc")])
def test_more_than_100_recipients_in_all_is_invalid(
        shared: Shared, counts: tuple[int, int, int], field: str):
    project, alice = shared.project, shared.alice
    to, cc, bcc = (["Bob"] * n for n in counts)
    error = rejected(project, alice, msg(to, cc=cc, bcc=bcc), 422, "INVALID_ARGUMENT")
    assert error["details"]["field"] == field


def test_100_recipients_in_all_are_admitted(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(["Bob"] * 40, "Handoff", "x", cc=["Bob"] * 30, bcc=[bob.label] * 30)
    assert len(sent["delivery"]["observations"]) == 1


@pytest.mark.parametrize(("fields", "field"), [
    ({"subject": "x" * 201}, "subject"),
    ({"subject": ""}, "subject"),
    ({"subject": "two\nlines"}, "subject"),
    ({"subject": "carriage\rreturn"}, "subject"),
    ({"subject": None}, "subject"),
    ({"topic": "t" * 65}, "topic"),
    ({"topic": ""}, "topic"),
    ({"topic": "build logs"}, "topic"),
    ({"topic": "build.logs"}, "topic"),
    ({"topic": "logs\n"}, "topic"),
    ({"thread_id": "t" * 129}, "thread_id"),
    ({"thread_id": ""}, "thread_id"),
    ({"thread_id": "a/b"}, "thread_id"),
    ({"thread_id": "a b"}, "thread_id"),
    ({"idempotency_key": "k" * 256}, "idempotency_key"),
    ({"idempotency_key": ""}, "idempotency_key"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_field_past_its_limit_is_invalid_argument_naming_it(
        shared: Shared, fields: Json, field: str):
    project, alice = shared.project, shared.alice
    error = rejected(project, alice, msg("Bob", **fields), 422, "INVALID_ARGUMENT")
    assert error["details"]["field"] == field


def test_a_missing_subject_is_invalid_argument(shared: Shared):
    project, alice = shared.project, shared.alice
    error = rejected(project, alice, {"to": ["Bob"], "body_md": "x"}, 422, "INVALID_ARGUMENT")
    assert error["details"]["field"] == "subject"


def test_fields_at_their_limits_are_admitted(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    fields = {"topic": "T_-9" * 16, "idempotency_key": "k" * 255}
    sent = alice.api.send("Bob", "s" * 200, "x", **fields)
    assert sent["subject"] == "s" * 200
    assert sent["topic"] == fields["topic"]
    # A thread id at its limit is well formed: no such thread (ids are the server's).
    longest = alice.api.http.post("/v1/messages", json={
        "to": ["Bob"], "subject": "s", "body_md": "x", "thread_id": "a.B_-9" * 21 + "xx"})
    assert longest.status_code == 404, longest.text


@pytest.mark.parametrize("name", ["", "n" * 65, "two\nlines", "Bob [abc123]", "x]", "[x",
                                  " Lead", "Lead ", "\tLead"])
def test_a_bad_agent_name_is_refused_at_registration_and_no_agent_is_created(
        shared: Shared, name: str):
    project = shared.project
    before = project_state(project.stack, project.project_id)
    response = project.admin.http.post(f"/v1/projects/{project.project_id}/agents",
                                       json={"name": name, "transport": {"kind": "inbox"}})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert response.json()["error"]["details"]["field"] == "name"
    assert project_state(project.stack, project.project_id) == before


@pytest.mark.parametrize("name", ["API review", "n" * 64, "é" * 64, "x"])
def test_a_good_agent_name_is_registered_and_addressable(project: Project, name: str):
    alice, agent = project.agent("Alice"), project.agent(name)
    assert agent.label == f"{name} [{agent.row['ref']}]"
    for address in (name, agent.label):
        sent = alice.api.send(address, "Hello", "x")
        assert [o["agent_id"] for o in sent["delivery"]["observations"]] == [agent.id]


@pytest.mark.parametrize("body_md", ["x" * (MIB + 1), "é" * (MIB // 2) + "x"],
                         ids=["ascii", "two-byte-chars"])
def test_a_body_one_byte_over_the_limit_is_body_too_large(shared: Shared, body_md: str):
    project, alice = shared.project, shared.alice
    error = rejected(project, alice, msg("Bob", body_md=body_md), 413, "BODY_TOO_LARGE")
    assert error["details"]["max_bytes"] == MIB


def test_a_body_of_exactly_the_limit_is_admitted_byte_for_byte(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    body_md = "é" * (MIB // 2)
    sent = alice.api.send("Bob", "Large", body_md)
    assert alice.api.get_message(sent["id"])["body_md"] == body_md


@pytest.mark.parametrize("body", [
    msg(["Bob", "Carol"], resource_notice=notice(), idempotency_key="n1"),
    {"to": ["Bob"], "resource_notice": notice()},
    {"to": ["Bob"], "cc": ["Carol"], "resource_notice": notice(), "idempotency_key": "n1"},
    *[{"to": ["Bob"], "resource_notice": notice(**{field: value}), "idempotency_key": "n1"}
      for field, value in [
          ("resource_id", ""), ("resource_id", "-gpu"), ("resource_id", "g" * 97),
          ("resource_id", "gpu 0"), ("resource_id", "gpu/0"), ("resource_id", "gpu-0\n"),
          ("resource_id", "gpü"), ("phase_id", "_phase"), ("phase_id", "phase\n"),
          ("state", "done"), ("next_action", "retry"), ("next_action", "drop_dependency"),
      ]],
    {"to": ["Bob"], "resource_notice": notice(state="cancelled", next_action="retry_admission"),
     "idempotency_key": "n1"},
])
def test_a_malformed_resource_notice_is_resource_notice_invalid(shared: Shared, body: Json):
    project, alice = shared.project, shared.alice
    rejected(project, alice, body, 422, "RESOURCE_NOTICE_INVALID")


@pytest.mark.parametrize(("state", "action", "policy"), [
    ("released", "none", "quiet"), ("released", "retry_admission", "wake"),
    ("cancelled", "none", "quiet"), ("cancelled", "drop_dependency", "wake")])
def test_a_resource_notice_is_quiet_only_when_no_action_follows(
        project: Project, state: str, action: str, policy: str):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", resource_notice=notice(state=state, next_action=action),
                          idempotency_key=f"{state}-{action}")
    assert sent["notification_policy"] == policy
    assert {d["notification_policy"] for d in alice.api.message_deliveries(sent["id"])} == {
        policy}


EXCLUDED_FROM_NOTICES = [
    ("subject", "Released"), ("body_md", "x"), ("body_md", ""), ("cc", []), ("cc", ["Carol"]),
    ("bcc", []), ("importance", "normal"), ("importance", "urgent"), ("ack_required", False),
    ("ack_required", True), ("notification_policy", "wake"), ("notification_policy", "quiet"),
    ("delivery_policy", "checked"), ("delivery_policy", "durable"), ("topic", "locks"),
    ("summary", "db lock"), ("probe", False), ("probe", True),
]


@pytest.mark.parametrize(("field", "value"), EXCLUDED_FROM_NOTICES)
def test_every_field_a_resource_notice_excludes_is_refused_naming_it(
        shared: Shared, field: str, value: Any):
    body = {"to": ["Bob"], "resource_notice": notice(), "idempotency_key": "n1", field: value}
    error = rejected(shared.project, shared.alice, body, 422, "RESOURCE_NOTICE_INVALID")
    assert error["details"]["field"] == field and field in error["message"]


# Words that would state the claim as fact, grant something, or ask for something.
NOTICE_FORBIDDEN = ("free", "proceed", "may ", "can ", "should", "please", "send", "reply",
                    "respond", "admitted again", "the resource was")


@pytest.mark.parametrize(("state", "action", "subject", "claim"), [
    ("released", "retry_admission", "Alice reports `db-lock` released (phase migrate:1)",
     "Alice reports that `db-lock` was released (phase `migrate:1`)."),
    ("released", "none", "Alice reports `db-lock` released (phase migrate:1)",
     "Alice reports that `db-lock` was released (phase `migrate:1`)."),
    ("cancelled", "drop_dependency",
     "Alice reports that the dependency on `db-lock` for phase migrate:1 was cancelled",
     "Alice reports that the dependency on `db-lock` for phase `migrate:1` was cancelled."),
])
def test_a_resource_notice_reports_the_sender_s_claim_and_asks_for_nothing(
        project: Project, state: str, action: str, subject: str, claim: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    ids = {"resource_id": "db-lock", "phase_id": "migrate:1"}
    sent = alice.api.send("Bob", resource_notice=notice(**ids, state=state, next_action=action),
                          idempotency_key="n1")
    assert sent["subject"] == subject
    assert sent["body_md"].startswith(claim)
    text = f"{sent['subject']}\n{sent['body_md']}".lower()
    assert not [w for w in NOTICE_FORBIDDEN if w in text]
    assert sent["resource_notice"] == notice(**ids, state=state, next_action=action)
    (got,) = wait_until(lambda: bob.api.inbox()["messages"], what="the notice")
    assert (got["subject"], got["body_md"]) == (sent["subject"], sent["body_md"])
    assert got.get("topic") is None and "summary" not in got


def test_a_resource_notice_subject_stays_within_200_characters(project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    long_ids = {"resource_id": "r" * 96, "phase_id": "p" * 96, "state": "cancelled"}
    sent = alice.api.send("Bob", resource_notice=notice(**long_ids), idempotency_key="n1")
    assert 0 < len(sent["subject"]) <= 200


BOUND = {"bound_source": {"kind": "t3", "thread_id": "thr-1"}}
BOUND_NO_THREAD = {"bound_source": {"kind": "tmux", "title": "pane 2"}}


@pytest.mark.parametrize(("bob", "carol", "fields", "policy"), [
    (BOUND, None, {}, "quiet"),
    (BOUND, BOUND, {"cc": ["Carol"]}, "quiet"),
    (BOUND, None, {"importance": "low"}, "quiet"),
    (BOUND, None, {"importance": "normal", "ack_required": False}, "quiet"),
    (BOUND, None, {"importance": "high"}, "wake"),
    (BOUND, None, {"importance": "urgent"}, "wake"),
    (BOUND, None, {"ack_required": True}, "wake"),
    (BOUND_NO_THREAD, None, {}, "wake"),
    ({}, None, {}, "wake"),
    (BOUND, {}, {"bcc": ["Carol"]}, "wake"),
    (BOUND, None, {"notification_policy": "wake"}, "wake"),
    ({}, None, {"notification_policy": "quiet"}, "quiet"),
])
def test_the_default_notification_policy_follows_the_table(
        project: Project, bob: Json, carol: Json | None, fields: Json, policy: str):
    alice = project.agent("Alice")
    project.agent("Bob", **bob)
    if carol is not None:
        project.agent("Carol", **carol)
    sent = alice.api.send("Bob", "Handoff", "x", **fields)
    assert sent["notification_policy"] == policy
    assert {d["notification_policy"] for d in alice.api.message_deliveries(sent["id"])} == {
        policy}


def test_the_same_agent_named_three_ways_gets_one_delivery(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(["Bob"], "Handoff", "x", cc=[bob.label], bcc=[bob.id])
    [obs] = sent["delivery"]["observations"]
    assert obs["agent_id"] == bob.id
    assert [d["delivery_id"] for d in alice.api.message_deliveries(sent["id"])] == [
        obs["delivery_id"]]
    with project.stack.redis() as r:
        inbox = keys.inbox(project.project_id, bob.id)
        wait_until(lambda: r.zcard(inbox), what="Bob's delivery")
        assert r.zrange(inbox, 0, -1) == [obs["delivery_id"]]


@pytest.mark.parametrize("header", [None, "Bearer cat_not-a-token", "Bearer", "Basic abc",
                                    "cat_token-without-scheme"])
def test_a_missing_or_unknown_token_is_unauthenticated(shared: Shared, header: str | None):
    project = shared.project
    before = project_state(project.stack, project.project_id)
    headers = {"authorization": header} if header is not None else {}
    with httpx.Client(base_url=project.stack.api_url, headers=headers) as http:
        response = http.post("/v1/messages", json=msg("Bob"))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"
    assert project_state(project.stack, project.project_id) == before


@pytest.mark.parametrize(("who", "method", "path", "body"), [
    ("project", "POST", "/v1/messages", msg("Bob")),
    ("operator", "POST", "/v1/messages", msg("Bob")),
    ("agent", "POST", "/v1/projects", {"project_key": "/srv/x"}),
    ("project", "POST", "/v1/projects", {"project_key": "/srv/x"}),
    ("agent", "POST", "/v1/projects/{pid}/agents", {"name": "Eve",
                                                    "transport": {"kind": "inbox"}}),
    ("agent", "POST", "/v1/projects/{pid}/agents/{bob}/retire", None),
    ("other project", "GET", "/v1/projects/{pid}/agents", None),
    ("other agent", "GET", "/v1/projects/{pid}/agents", None),
    ("other project", "POST", "/v1/projects/{pid}/agents", {"name": "Eve",
                                                            "transport": {"kind": "inbox"}}),
    ("project", "GET", "/v1/agents/me/inbox", None),
])
def test_a_valid_token_outside_its_scope_is_forbidden(
        shared: Shared, who: str, method: str, path: str, body: Json | None):
    project = shared.project
    token = {"project": project.token, "operator": project.stack.operator_token,
             "agent": shared.alice.row["token"], "other project": shared.other_token,
             "other agent": shared.mallory_token}[who]
    before = project_state(project.stack, project.project_id)
    with httpx.Client(base_url=project.stack.api_url,
                      headers={"authorization": f"Bearer {token}"}) as http:
        response = http.request(method, path.format(pid=project.project_id, bob=shared.bob.id),
                                json=body)
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "FORBIDDEN"
    assert project_state(project.stack, project.project_id) == before
