"""Who a message is from (docs/http-api.md: Sending, "Sessions and subagents").

``from`` is the sender's exact address ``Name [ref]`` in every view, so copying
it into ``to`` reaches that sender and no other; ``sender_name`` is the bare
name. A subagent that writes to another session speaks with its root's
address (``via`` names it): replies and delivery events go to the root.
Within its own session tree it speaks as itself.
"""

from __future__ import annotations

import json
from typing import Any

from messaging.store import keys
from tests.integration.conftest import Agent, Project
from tests.stack import wait_until

Json = dict[str, Any]


def mail_of(agent: Agent, count: int = 1) -> list[Json]:
    """Wait until the agent's inbox holds ``count`` messages; those."""
    def enough() -> list[Json] | None:
        mail: list[Json] = agent.api.inbox(limit=500)["messages"]
        return mail if len(mail) >= count else None
    found: list[Json] = wait_until(enough, what=f"{count} messages for {agent.label}")
    return found


def delivery_events(project: Project, agent: Agent) -> list[Json]:
    """The ``delivery`` entries of the agent's event stream, read from the store."""
    with project.stack.redis() as r:
        entries = r.xrange(keys.events(project.project_id, agent.id))
    return [json.loads(f["data"]) for _, f in entries if f["type"] == "delivery"]


def test_replying_to_from_reaches_the_sender_after_its_name_was_taken_again(
        project: Project):
    first_alice = project.agent("Alice")
    bob = project.agent("Bob")
    sent = first_alice.api.send("Bob", "Schema ready", "migrations pushed")
    assert (sent["from"], sent["sender_name"]) == (first_alice.label, "Alice")
    assert "via" not in sent
    (got,) = mail_of(bob)
    assert (got["from"], got["sender_name"]) == (first_alice.label, "Alice")
    assert bob.api.get_message(sent["id"])["from"] == first_alice.label
    assert bob.api.thread(sent["thread_id"])[0]["from"] == first_alice.label

    second_alice = project.agent("Alice")  # the newest registration wins the bare name
    answer = bob.api.send([got["from"]], "Re: Schema ready", "thanks")
    assert answer["delivery"]["observations"][0]["agent_id"] == first_alice.id
    (back,) = [m for m in mail_of(first_alice, 1) if m["id"] == answer["id"]]
    assert back["from"] == bob.label
    assert second_alice.api.inbox()["messages"] == []


def test_a_subagent_writing_to_another_session_speaks_with_its_root_s_address(
        project: Project):
    lead = project.agent("Lead")
    sub = project.agent("Sub", parent=lead.id)
    other = project.agent("Other")

    sent = sub.api.send("Other", "Build broken", "the main branch fails its tests")
    assert (sent["from"], sent["sender_name"], sent["sender_id"], sent["via"]) == (
        lead.label, "Lead", lead.id, sub.label)
    (got,) = mail_of(other)
    assert (got["from"], got["sender_id"], got["via"]) == (lead.label, lead.id, sub.label)
    assert "via_id" not in got

    # The subagent still sees what it sent, and its deliveries.
    assert sub.api.get_message(sent["id"])["via"] == sub.label
    assert [d["agent_id"] for d in sub.api.message_deliveries(sent["id"])] == [other.id]

    # Replies, by `from` or by the reply route, go to the session's main conversation.
    by_from = other.api.send([got["from"]], "Re: Build broken", "looking")
    by_reply = other.api.reply(got["id"], "fixed in the next commit")
    assert {m["id"] for m in mail_of(lead, 2)} == {by_from["id"], by_reply["id"]}
    assert sub.api.inbox()["messages"] == []

    # Delivery events of the send are the root's.
    wait_until(lambda: [e for e in delivery_events(project, lead)
                        if e["message_id"] == sent["id"]], what="the root's delivery event")
    assert not [e for e in delivery_events(project, sub) if e["message_id"] == sent["id"]]


def test_within_its_own_session_tree_a_subagent_speaks_as_itself(project: Project):
    lead = project.agent("Lead")
    sub = project.agent("Sub", parent=lead.id)
    sibling = project.agent("Sibling", parent=lead.id)
    helper = project.agent("Helper", parent=sub.id)
    for to, reader in (("main", lead), ("Sibling", sibling), ("Helper", helper)):
        sent = sub.api.send(to, f"Note for {to}", "x")
        assert (sent["from"], sent["sender_id"]) == (sub.label, sub.id)
        assert "via" not in sent
        got = [m for m in mail_of(reader) if m["id"] == sent["id"]]
        assert got and got[0]["from"] == sub.label
    # A reply from the parent reaches the subagent itself.
    (note,) = [m for m in mail_of(lead) if m["subject"] == "Note for main"]
    answer = lead.api.reply(note["id"], "ok")
    assert [m["id"] for m in mail_of(sub)] == [answer["id"]]


def test_one_recipient_outside_the_tree_makes_the_whole_send_the_root_s(project: Project):
    lead = project.agent("Lead")
    sub = project.agent("Sub", parent=lead.id)
    sibling = project.agent("Sibling", parent=lead.id)
    project.agent("Other")
    sent = sub.api.send(["Sibling", "Other"], "Heads up", "x")
    assert (sent["from"], sent["via"]) == (lead.label, sub.label)
    (got,) = mail_of(sibling)
    assert (got["from"], got["via"]) == (lead.label, sub.label)


def test_the_human_sees_a_subagent_s_mail_under_its_session_s_address(project: Project):
    lead = project.agent("Lead")
    sub = project.agent("Sub", parent=lead.id)
    sent = sub.api.send("human", "Need a decision", "which schema?")
    assert (sent["from"], sent["via"]) == (lead.label, sub.label)
    path = f"/v1/projects/{project.project_id}/human/inbox"
    messages = wait_until(lambda: project.admin.request("GET", path)["messages"],
                          what="the message in the human's inbox")
    assert [(m["from"], m["via"]) for m in messages] == [(lead.label, sub.label)]


def test_search_filters_by_sender_name_or_exact_address(project: Project):
    first_alice = project.agent("Alice")
    bob = project.agent("Bob")
    first_alice.api.send("Bob", "Quarterly figures", "from the first")
    second_alice = project.agent("Alice")
    second_alice.api.send("Bob", "Quarterly figures", "from the second")

    def found(**filters: Any) -> list[str]:
        return sorted(m["from"] for m in bob.api.search("quarterly", **filters)["messages"])

    wait_until(lambda: len(found()) == 2, what="both messages indexed")
    assert found(sender="Alice") == sorted([first_alice.label, second_alice.label])
    assert found(sender=first_alice.label) == [first_alice.label]
