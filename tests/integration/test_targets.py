"""Which agent a name reaches: scope, presence, most recent use; `parent` and `main`;
agent-name rules; the default notification policy. On the real stack."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from messaging.client import CourierAPIError
from messaging.store import keys
from messaging.store.scripts import source
from tests.integration.conftest import Agent, Project
from tests.stack import Stack, project_state, wait_until

Json = dict[str, Any]


def reached(sender: Agent, to: str, **fields: Any) -> str:
    """The agent id a send from ``sender`` to ``to`` is pinned to."""
    sent = sender.api.send(to, "Handoff", "x", **fields)
    (obs,) = sent["delivery"]["observations"]
    return str(obs["agent_id"])


def refused(fn: Any, *args: Any, **kwargs: Any) -> CourierAPIError:
    with pytest.raises(CourierAPIError) as e:
        fn(*args, **kwargs)
    return e.value


# which agent a name reaches


def test_an_older_agent_reporting_exited_does_not_take_the_name_from_a_newer_live_one(
        project: Project):
    alice = project.agent("Alice")
    older, newer = project.agent("Worker"), project.agent("Worker")
    newer.api.set_presence("idle")
    older.api.set_presence("exited")
    assert reached(alice, "Worker") == newer.id


def test_a_fresh_registration_wins_until_an_older_agent_is_used_again(project: Project):
    alice = project.agent("Alice")
    older, newer = project.agent("Worker"), project.agent("Worker")
    assert reached(alice, "Worker") == newer.id
    older.api.set_presence("busy")
    assert reached(alice, "Worker") == older.id
    newer.api.send("Alice", "Status", "x")  # a send is use
    assert reached(alice, "Worker") == newer.id


def test_reading_mail_is_not_use(project: Project):
    alice = project.agent("Alice")
    older, newer = project.agent("Worker"), project.agent("Worker")
    older.api.inbox()
    older.api.set_presence("exited")
    older.api.set_presence("exited")
    assert reached(alice, "Worker") == newer.id


def test_when_every_agent_of_a_name_exited_the_most_recently_used_one_gets_the_mail(
        project: Project):
    alice = project.agent("Alice")
    older, newer = project.agent("Worker"), project.agent("Worker")
    older.api.set_presence("busy")
    newer.api.set_presence("exited")
    older.api.set_presence("exited")
    sent = alice.api.send("Worker", "Handoff", "x")
    (obs,) = sent["delivery"]["observations"]
    assert obs["agent_id"] == older.id and obs["presence"] == "exited"
    assert any("exited" in w for w in sent["delivery"]["warnings"])


def test_exited_wins_over_source_lost(project: Project):
    alice = project.agent("Alice")
    older, newer = project.agent("Worker"), project.agent("Worker")
    older.api.set_presence("exited")
    newer.api.set_presence("source_lost")
    assert reached(alice, "Worker") == older.id


def test_an_agent_of_the_sender_s_own_session_tree_wins_over_a_newer_live_namesake(
        project: Project):
    lead_a, lead_b = project.agent("LeadA"), project.agent("LeadB")
    mine = project.agent("Reviewer", parent=lead_a.id)
    coder = project.agent("Coder", parent=lead_a.id)
    theirs = project.agent("Reviewer", parent=lead_b.id)
    theirs.api.set_presence("busy")
    assert reached(coder, "Reviewer") == mine.id
    assert reached(lead_a, "Reviewer") == mine.id  # the root is in its own tree
    outsider = project.agent("Outsider")
    assert reached(outsider, "Reviewer") == theirs.id


def test_scope_comes_before_presence(project: Project):
    lead_a, lead_b = project.agent("LeadA"), project.agent("LeadB")
    mine = project.agent("Reviewer", parent=lead_a.id)
    project.agent("Reviewer", parent=lead_b.id)
    mine.api.set_presence("exited")
    assert reached(lead_a, "Reviewer") == mine.id


def test_an_idle_subscription_resolves_a_name_as_admission_does(project: Project):
    alice = project.agent("Alice")
    older, newer = project.agent("Worker"), project.agent("Worker")
    newer.api.set_presence("busy")
    older.api.set_presence("exited")
    sub = alice.api.subscribe_idle("Worker")
    assert sub["target_id"] == newer.id


def _tie(project: Project, *agents: Agent) -> None:
    """Give ``agents`` the same last use, to the microsecond: a tie the rules cannot break
    (as two registrations in the same microsecond, by two API processes, would make)."""
    with project.stack.redis() as r:
        for a in agents:
            record = json.loads(r.hget(keys.agents(project.project_id), a.id))
            record["used_us"] = "1700000000000000"
            r.hset(keys.agents(project.project_id), a.id, json.dumps(record))


def test_a_bare_name_two_agents_tie_for_is_ambiguous_and_lists_both_labels(project: Project):
    alice = project.agent("Alice")
    first, second = project.agent("Worker"), project.agent("Worker")
    _tie(project, first, second)
    before = project_state(project.stack, project.project_id)
    e = refused(alice.api.send, "Worker", "Handoff", "x")
    assert (e.status, e.code) == (422, "RECIPIENT_AMBIGUOUS")
    assert e.details["recipients"] == [{
        "to": "Worker", "reason": "ambiguous", "reason_code": "RECIPIENT_AMBIGUOUS",
        "candidates": [first.label, second.label]}]
    assert first.label in str(e) and second.label in str(e)
    assert project_state(project.stack, project.project_id) == before  # nothing stored


def test_a_label_of_a_tied_name_reaches_its_agent(project: Project):
    alice = project.agent("Alice")
    first, second = project.agent("Worker"), project.agent("Worker")
    _tie(project, first, second)
    assert reached(alice, first.label) == first.id
    assert reached(alice, second.label) == second.id


def test_use_breaks_a_tie_and_the_bare_name_reaches_the_agent_used(project: Project):
    alice = project.agent("Alice")
    first, second = project.agent("Worker"), project.agent("Worker")
    _tie(project, first, second)
    first.api.set_presence("busy")
    assert reached(alice, "Worker") == first.id


def test_an_idle_subscription_to_a_tied_name_is_ambiguous_too(project: Project):
    alice = project.agent("Alice")
    first, second = project.agent("Worker"), project.agent("Worker")
    _tie(project, first, second)
    e = refused(alice.api.subscribe_idle, "Worker")
    assert e.code == "RECIPIENT_AMBIGUOUS"
    assert e.details["recipients"][0]["candidates"] == [first.label, second.label]


def test_the_chosen_agent_is_pinned_whatever_registers_later(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Handoff", "x")
    project.agent("Bob")
    did = sent["delivery"]["observations"][0]["delivery_id"]
    view = wait_until(lambda: (v := alice.api.delivery(did))["outcome"] and v)
    assert view["agent_id"] == bob.id and view["target"] == "pinned"


# parent and main


def test_main_reaches_the_root_of_the_sender_s_parent_chain(project: Project):
    lead = project.agent("Lead")
    child = project.agent("Planner", parent=lead.id)
    grandchild = project.agent("Coder", parent=child.id)
    assert reached(grandchild, "main") == lead.id
    assert reached(child, "main") == lead.id
    lead.api.inbox()
    got = wait_until(lambda: len(lead.api.inbox()["messages"]) == 2 or None, what="two mails")
    assert got


def test_main_from_an_agent_without_a_parent_is_recipient_not_found(project: Project):
    lead = project.agent("Lead")
    before = project_state(project.stack, project.project_id)
    e = refused(lead.api.send, "main", "Handoff", "x")
    assert e.status == 422 and e.body["error"]["code"] == "RECIPIENT_NOT_FOUND"
    assert e.body["error"]["details"]["recipients"][0]["reason"] == "no_main"
    assert e.body["persisted"] is False
    assert project_state(project.stack, project.project_id) == before


@pytest.mark.parametrize("which", ["unknown", "retired", "other_project"])
def test_a_parent_that_is_not_an_active_agent_of_the_project_is_refused(
        project: Project, stack: Stack, which: str):
    lead = project.agent("Lead")
    if which == "retired":
        project.admin.retire_agent(project.project_id, lead.id)
        parent = lead.id
    elif which == "other_project":
        with stack.operator() as op:
            other = op.create_project(f"/srv/checkouts/other-{project.project_id}")
        with stack.client(other["token"]) as admin:
            parent = admin.register_agent(other["project_id"], "Stranger")["agent_id"]
    else:
        parent = lead.id[:-4] + "0000"
    before = project_state(project.stack, project.project_id)
    e = refused(project.admin.register_agent, project.project_id, "Sub", parent=parent)
    assert e.status == 422 and e.body["error"]["details"]["field"] == "parent"
    assert project_state(project.stack, project.project_id) == before


def test_the_agent_list_shows_parent_and_inbound(project: Project):
    lead = project.agent("Lead")
    project.agent("Sub", parent=lead.id, inbound="hold")
    rows = {r["name"]: r for r in project.admin.list_agents(project.project_id)}
    assert rows["Lead"]["parent"] is None and rows["Lead"]["inbound"] == "open"
    assert rows["Sub"]["parent"] == lead.id and rows["Sub"]["inbound"] == "hold"


# agent names


@pytest.mark.parametrize("name", [
    "main", "MAIN", "Courier", "human", "agt_x", "a\x00b", "a\tb", "evil\u202ename", "a\u2066b",
    " lead", "lead ", "a[b", "x" * 65, "",
])
def test_a_name_outside_the_rules_is_refused_naming_name_and_nothing_is_stored(
        project: Project, name: str):
    project.agent("Lead")
    before = project_state(project.stack, project.project_id)
    e = refused(project.admin.register_agent, project.project_id, name)
    assert e.status == 422 and e.body["error"]["code"] == "INVALID_ARGUMENT"
    assert e.body["error"]["details"]["field"] == "name"
    assert project_state(project.stack, project.project_id) == before


@pytest.mark.parametrize("name", ["API review", "mainframe", "x" * 64, "Rédacteur"])
def test_names_inside_the_rules_are_registered(project: Project, name: str):
    assert project.agent(name).row["name"] == name


# notification policy


@pytest.mark.parametrize(("source", "policy"), [
    ({"kind": "t3", "thread_id": "th-1"}, "quiet"),
    ({"kind": "t3"}, "wake"),
    ({"kind": "claude-code", "thread_id": "th-1"}, "wake"),
    (None, "wake"),
])
def test_the_default_is_quiet_only_for_t3_sources_with_a_thread(
        project: Project, source: Json | None, policy: str):
    alice = project.agent("Alice")
    project.agent("Bob", **({"bound_source": source} if source else {}))
    assert alice.api.send("Bob", "Handoff", "x")["notification_policy"] == policy


def test_a_probe_keeps_wake_even_to_a_t3_thread(project: Project):
    alice = project.agent("Alice")
    project.agent("Bob", bound_source={"kind": "t3", "thread_id": "th-1"})
    assert alice.api.send("Bob", "Ping", "x", probe=True)["notification_policy"] == "wake"
    quiet = alice.api.send("Bob", "Ping", "x", probe=True, notification_policy="quiet")
    assert quiet["notification_policy"] == "quiet"


# one round trip


def script_sha(name: str) -> str:
    import hashlib
    return hashlib.sha1(source(name).encode()).hexdigest()


def publishing(command: str) -> bool:
    """A command of the API's publisher (a project joining a ring): it comes after
    admission, which made the deliveries ready itself."""
    return command.startswith(f"ZADD {keys.ring('')}")


def test_admission_is_one_store_command_per_send_whatever_the_target(
        project: Project, stack: Stack):
    """MONITOR sees every command; the API's connections send one EVALSHA per send."""
    alice, bob = project.agent("Alice"), project.agent("Bob")
    project.agent("Held", inbound="hold")
    project.admin.request("PUT", f"/v1/projects/{project.project_id}/names/Later", json={})
    alice.api.send("Bob", "Warm", "x")  # caches the sender's token and identity
    seen: list[Json] = []
    marker = f"end-of-test-{project.project_id}"
    ready = threading.Event()

    def watch() -> None:
        with stack.redis() as r, r.monitor() as m:
            ready.set()
            for cmd in m.listen():
                seen.append(cmd)
                if marker in cmd["command"]:
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    ready.wait(5)
    with stack.redis() as r:
        r.echo("start")
    targets = ["Bob", "Held", "Later", bob.label, bob.id]
    for to in targets:
        alice.api.send(to, "Count", "x")
    with stack.redis() as r:
        r.echo(marker)
    t.join(10)
    sha = script_sha("admit_message")
    admit = [c for c in seen if c["command"].upper().startswith(f"EVALSHA {sha.upper()}")
             or c["command"].startswith(f"EVALSHA {sha}")]
    assert len(admit) == len(targets)
    api_clients = {(c["client_address"], c["client_port"]) for c in admit}
    from_api = [c for c in seen if (c["client_address"], c["client_port"]) in api_clients
                and not publishing(c["command"])]
    assert len(from_api) == len(targets), [c["command"][:60] for c in from_api]
