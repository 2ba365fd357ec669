"""Resolution and reading (docs/http-api.md: Projects and agents, Sending, Reading), real stack.

Who gets a bare-name send, pinning, the inbox and its cursor, filters, read and
ack, bcc privacy, replies, threads, deliveries, and history after retire/close.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from messaging import ids
from messaging.client import CourierAPIError
from messaging.store import keys
from tests.integration.conftest import Agent, Project
from tests.stack import project_state, wait_until

Json = dict[str, Any]
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
PAGE = 7
MANY = 150


def stored_inbox(project: Project, agent: Agent) -> list[str]:
    """The delivery ids in an agent's inbox, oldest first, read from the store."""
    with project.stack.redis() as r:
        return list(r.zrange(keys.inbox(project.project_id, agent.id), 0, -1))


def arrived(project: Project, agent: Agent, count: int) -> list[str]:
    """Wait until ``count`` deliveries are in the agent's inbox (without fetching it)."""
    return wait_until(lambda: (ids := stored_inbox(project, agent)) and len(ids) >= count and ids,
                      what=f"{count} deliveries in {agent.label}'s inbox")


def recipients_of(sent: Json) -> list[str]:
    """The agent ids a send was pinned to."""
    return [o["agent_id"] for o in sent["delivery"]["observations"]]


def not_found(call: Any, *args: Any) -> None:
    """Assert that the call is a 404 NOT_FOUND."""
    with pytest.raises(CourierAPIError) as caught:
        call(*args)
    assert (caught.value.status, caught.value.code) == (404, "NOT_FOUND")


# resolution


def test_a_bare_name_goes_to_the_newest_registration(project: Project):
    alice, older, newer = project.agent("Alice"), project.agent("Bob"), project.agent("Bob")
    assert older.id != newer.id
    assert recipients_of(alice.api.send("Bob", "Hi", "x")) == [newer.id]


@pytest.mark.parametrize("activity", ["presence", "send"])
def test_use_of_an_older_namesake_makes_it_win_the_name(project: Project, activity: str):
    alice, older, _ = project.agent("Alice"), project.agent("Bob"), project.agent("Bob")
    if activity == "presence":
        older.api.set_presence("idle")
    else:
        older.api.send("Alice", "Back", "x")
    assert recipients_of(alice.api.send("Bob", "Hi", "x")) == [older.id]


def test_an_admitted_message_stays_with_its_pinned_agent(project: Project):
    alice, first = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x")
    second = project.agent("Bob")
    second.api.set_presence("idle")
    assert recipients_of(alice.api.send("Bob", "Later", "y")) == [second.id]

    [delivery_id] = arrived(project, first, 1)
    assert delivery_id == sent["delivery"]["observations"][0]["delivery_id"]
    assert alice.api.delivery(delivery_id)["agent_id"] == first.id
    arrived(project, second, 1)
    assert [m["subject"] for m in second.api.inbox()["messages"]] == ["Later"]


@pytest.mark.parametrize("form", ["label", "agent_id"])
def test_a_label_or_agent_id_reaches_exactly_that_agent(project: Project, form: str):
    alice, older, newer = project.agent("Alice"), project.agent("Bob"), project.agent("Bob")
    for target in (older, newer):
        address = target.label if form == "label" else target.id
        sent = alice.api.send(address, "Hi", "x")
        assert recipients_of(sent) == [target.id]
        assert sent["delivery"]["observations"][0]["recipient"] == target.label


# the inbox


def test_pages_of_seven_return_every_message_once_in_arrival_order(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = {alice.api.send("Bob", f"m{i}", "x")["id"] for i in range(MANY)}
    order = arrived(project, bob, MANY)

    seen: list[str] = []
    cursor = None
    while True:
        page = bob.api.inbox(cursor=cursor, limit=PAGE)
        assert len(page["messages"]) <= PAGE
        if not page["messages"]:
            break
        seen += [m["delivery_id"] for m in page["messages"]]
        cursor = page["next_cursor"]
        assert isinstance(cursor, str) and cursor

    assert seen == order
    assert len(seen) == MANY
    assert {m["id"] for m in bob.api.iter_inbox(limit=500)} == sent


def test_the_last_cursor_returns_nothing_then_exactly_what_arrived_since(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    for i in range(3):
        alice.api.send("Bob", f"m{i}", "x")
    arrived(project, bob, 3)
    last = bob.api.inbox(limit=500)
    assert len(last["messages"]) == 3

    empty = bob.api.inbox(cursor=last["next_cursor"])
    assert empty["messages"] == []
    assert empty["next_cursor"] == last["next_cursor"]

    late = [alice.api.send("Bob", f"late{i}", "x")["id"] for i in range(2)]
    arrived(project, bob, 5)
    since = [m["id"] for m in bob.api.inbox(cursor=empty["next_cursor"])["messages"]]
    assert sorted(since) == sorted(late)  # exactly those two; workers may reorder them


def test_a_cursor_skips_nothing_that_arrives_between_pages(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    for i in range(5):
        alice.api.send("Bob", f"a{i}", "x")
    arrived(project, bob, 5)
    first = bob.api.inbox(limit=3)
    for i in range(4):
        alice.api.send("Bob", f"b{i}", "x")
    order = arrived(project, bob, 9)
    rest = list(bob.api.iter_inbox(cursor=first["next_cursor"], limit=2))
    assert [m["delivery_id"] for m in first["messages"] + rest] == order


@pytest.mark.parametrize("limit", ["0", "501", "ten"])
def test_an_inbox_limit_outside_1_to_500_is_invalid(project: Project, limit: str):
    bob = project.agent("Bob")
    response = bob.api.http.get("/v1/agents/me/inbox", params={"limit": limit})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert response.json()["error"]["details"]["field"] == "limit"


def test_unread_only_leaves_out_what_was_read(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    ids = [alice.api.send("Bob", f"m{i}", "x")["id"] for i in range(3)]
    arrived(project, bob, 3)
    arrival = [m["id"] for m in bob.api.inbox()["messages"]]  # workers may reorder
    assert sorted(arrival) == sorted(ids)
    bob.api.mark_read(ids[1])
    unread = [m["id"] for m in bob.api.inbox(unread_only=True)["messages"]]
    assert unread == [i for i in arrival if i != ids[1]]
    assert [m["id"] for m in bob.api.inbox()["messages"]] == arrival


def test_urgent_only_keeps_high_and_urgent(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    ids = {imp: alice.api.send("Bob", imp, "x", importance=imp)["id"]
           for imp in ("low", "normal", "high", "urgent")}
    arrived(project, bob, 4)
    found = [m["id"] for m in bob.api.inbox(urgent_only=True)["messages"]]
    assert sorted(found) == sorted([ids["high"], ids["urgent"]])


def test_wake_only_returns_wake_mail_and_leaves_quiet_mail_unobserved(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    wake = alice.api.send("Bob", "now", "x")
    quiet = alice.api.send("Bob", "later", "x", notification_policy="quiet")
    arrived(project, bob, 2)
    assert [m["id"] for m in bob.api.inbox(wake_only=True)["messages"]] == [wake["id"]]
    stages = {m["id"]: project.admin.message_deliveries(m["id"])[0]["stage"]
              for m in (wake, quiet)}
    assert stages == {wake["id"]: "delivery_observed", quiet["id"]: "provider_result_recorded"}


def test_unobserved_only_leaves_out_what_was_observed_already(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    seen = alice.api.send("Bob", "seen", "x")
    arrived(project, bob, 1)
    bob.api.inbox()  # observed by this read
    fresh = alice.api.send("Bob", "fresh", "x")
    arrived(project, bob, 2)
    found = [m["id"] for m in bob.api.inbox(unobserved_only=True)["messages"]]
    assert found == [fresh["id"]] and seen["id"] not in found


def test_a_topic_filter_keeps_that_topic_only(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    build = [alice.api.send("Bob", f"b{i}", "x", topic="build")["id"] for i in range(2)]
    alice.api.send("Bob", "other", "x", topic="build-2")
    alice.api.send("Bob", "none", "x")
    arrived(project, bob, 4)
    found = [m["id"] for m in bob.api.inbox(topic="build")["messages"]]
    assert sorted(found) == sorted(build)  # workers may reorder arrivals


def test_a_filtered_page_with_a_small_limit_moves_on_without_skipping(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    wanted = {}  # delivery id -> message id of the urgent ones
    for i in range(6):
        sent = alice.api.send("Bob", f"m{i}", "x", importance="urgent" if i % 2 else "low")
        if i % 2:
            wanted[sent["delivery"]["observations"][0]["delivery_id"]] = sent["id"]
    order = arrived(project, bob, 6)  # arrival order, which workers may shuffle
    found = [m["id"] for m in bob.api.iter_inbox(limit=1, urgent_only=True)]
    assert found == [wanted[d] for d in order if d in wanted]


def test_a_read_that_says_it_does_not_show_the_agent_observes_nothing(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x")
    [obs] = sent["delivery"]["observations"]
    arrived(project, bob, 1)
    assert [m["id"] for m in bob.api.inbox(shown=False)["messages"]] == [sent["id"]]
    assert [m["id"] for m in bob.api.inbox(unobserved_only=True, shown=False)["messages"]] == [
        sent["id"]]
    after = alice.api.delivery(obs["delivery_id"])
    assert after["stage"] == "provider_result_recorded" and after["observed_ts"] is None


def test_fetching_records_delivery_observed_and_leaves_the_message_unread(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x")
    [obs] = sent["delivery"]["observations"]
    arrived(project, bob, 1)
    before = alice.api.delivery(obs["delivery_id"])
    assert before["stage"] == "provider_result_recorded" and before["observed_ts"] is None

    [item] = bob.api.inbox()["messages"]

    assert (item["delivery_id"], item["read_ts"], item["ack_ts"]) == (
        obs["delivery_id"], None, None)
    after = alice.api.delivery(obs["delivery_id"])
    assert after["stage"] == "delivery_observed"
    assert TS_RE.match(after["observed_ts"])
    assert after["stages"]["delivery_observed"] == after["observed_ts"]
    assert after["read_ts"] is None
    assert [m["read_ts"] for m in bob.api.inbox()["messages"]] == [None]


def test_read_is_idempotent_and_returns_the_first_timestamp(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x")
    first = bob.api.mark_read(sent["id"])
    assert TS_RE.match(first["read_ts"]) and first["ack_ts"] is None
    assert bob.api.mark_read(sent["id"]) == first


def test_ack_is_idempotent_keeps_the_read_time_and_returns_the_same_timestamps(
        project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x", ack_required=True)
    read = bob.api.mark_read(sent["id"])
    acked = bob.api.acknowledge(sent["id"])
    assert acked["read_ts"] == read["read_ts"] and TS_RE.match(acked["ack_ts"])
    assert bob.api.acknowledge(sent["id"]) == acked
    assert bob.api.mark_read(sent["id"]) == acked
    arrived(project, bob, 1)
    [item] = bob.api.inbox()["messages"]
    assert (item["read_ts"], item["ack_ts"]) == (acked["read_ts"], acked["ack_ts"])


def test_ack_of_an_unread_message_reads_it_too(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x")
    acked = bob.api.acknowledge(sent["id"])
    assert TS_RE.match(acked["read_ts"]) and TS_RE.match(acked["ack_ts"])


@pytest.mark.parametrize("mark", ["mark_read", "acknowledge"])
def test_only_a_recipient_may_mark_a_message(project: Project, mark: str):
    alice, _, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    sent = alice.api.send("Bob", "Hi", "x")
    not_found(getattr(alice.api, mark), sent["id"])
    not_found(getattr(carol.api, mark), sent["id"])


# who sees what


def test_bcc_is_seen_whole_by_the_sender_only(project: Project):
    alice, bob, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    dave, eve = project.agent("Dave"), project.agent("Eve")
    sent = alice.api.send("Bob", "Hi", "x", cc=["Carol"], bcc=["Dave", eve.label])

    assert alice.api.get_message(sent["id"])["bcc"] == ["Dave", eve.label]
    assert bob.api.get_message(sent["id"])["bcc"] == []
    assert carol.api.get_message(sent["id"])["bcc"] == []
    assert dave.api.get_message(sent["id"])["bcc"] == ["Dave"]
    assert eve.api.get_message(sent["id"])["bcc"] == [eve.label]


def test_bcc_stays_private_in_inboxes_and_threads(project: Project):
    alice, bob, dave = project.agent("Alice"), project.agent("Bob"), project.agent("Dave")
    sent = alice.api.send("Bob", "Hi", "x", bcc=["Dave"])
    arrived(project, bob, 1)
    arrived(project, dave, 1)
    assert [m["bcc"] for m in bob.api.inbox()["messages"]] == [[]]
    assert [m["bcc"] for m in bob.api.thread(sent["thread_id"])] == [[]]
    assert [m["bcc"] for m in dave.api.inbox()["messages"]] == [["Dave"]]


def test_a_recipient_sees_only_its_own_delivery(project: Project):
    alice, bob, dave = project.agent("Alice"), project.agent("Bob"), project.agent("Dave")
    sent = alice.api.send("Bob", "Hi", "x", bcc=["Dave"])
    assert [d["agent_id"] for d in bob.api.message_deliveries(sent["id"])] == [bob.id]
    dave_delivery = next(o["delivery_id"] for o in sent["delivery"]["observations"]
                         if o["agent_id"] == dave.id)
    not_found(bob.api.delivery, dave_delivery)


def test_the_summary_is_never_delivered(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x", summary="my own note")
    assert alice.api.get_message(sent["id"])["summary"] == "my own note"
    arrived(project, bob, 1)
    assert "summary" not in bob.api.get_message(sent["id"])
    assert "summary" not in bob.api.inbox()["messages"][0]


def test_a_message_is_not_found_for_an_agent_that_is_not_in_it(project: Project):
    alice, _, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    sent = alice.api.send("Bob", "Hi", "x")
    with project.stack.operator() as op:
        other = op.create_project(project.project_key + "-other")
    stranger = project.client(project.client(other["token"]).register_agent(
        other["project_id"], "Bob")["token"])
    for reader in (carol.api, stranger):
        not_found(reader.get_message, sent["id"])
        not_found(reader.message_deliveries, sent["id"])
        not_found(reader.thread, sent["thread_id"])
        not_found(reader.reply, sent["id"], "me too")


# replies and threads


def test_a_reply_keeps_the_thread_and_goes_to_the_original_sender(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    thread_id = alice.api.send("Bob", "Kickoff", "x")["thread_id"]
    sent = alice.api.send("Bob", "Plan", "x", thread_id=thread_id, topic="build")
    reply = bob.api.reply(sent["id"], "Done.")
    assert reply["thread_id"] == thread_id
    assert reply["to"] == [alice.label] and recipients_of(reply) == [alice.id]
    assert reply["from"] == bob.label and reply["in_reply_to"] == sent["id"]
    assert (reply["subject"], reply["body_md"], reply["topic"]) == ("Re: Plan", "Done.", "build")
    arrived(project, alice, 1)
    assert [m["id"] for m in alice.api.inbox()["messages"]] == [reply["id"]]


def _post_in(agent: Agent, thread_id: str, to: str = "Alice") -> int:
    got = agent.api.http.post("/v1/messages", json={
        "to": [to], "subject": "In the thread", "body_md": "x", "thread_id": thread_id})
    return got.status_code


def test_only_a_thread_s_participants_post_into_it(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    carol, dan = project.agent("Carol"), project.agent("Dan")
    started = alice.api.send("Bob", "Plan", "x", bcc=["Dan"])
    other = alice.api.send("Bob", "Other", "x")
    for thread_id in (started["thread_id"], other["thread_id"]):
        before = [m["id"] for m in alice.api.thread(thread_id)]
        assert _post_in(carol, thread_id) == 404  # it learned the id, it takes no part
        assert [m["id"] for m in alice.api.thread(thread_id)] == before
        assert _post_in(bob, thread_id) == 201  # a recipient
        assert _post_in(alice, thread_id, to="Bob") == 201  # the sender
    assert _post_in(dan, started["thread_id"]) == 201  # a bcc recipient takes part too
    assert _post_in(dan, other["thread_id"]) == 404
    # the project's human sees every thread of its project, and posts into any
    human = project.admin.http.post(f"/v1/projects/{project.project_id}/messages", json={
        "to": ["Alice"], "subject": "From the human", "body_md": "x",
        "thread_id": other["thread_id"]})
    assert human.status_code == 201, human.text


@pytest.mark.parametrize("thread_id", ["plan-8", "msg_0123456789abcdef0123456789", "x"])
def test_an_id_no_message_has_is_no_thread_to_post_into(project: Project, thread_id: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    before = project_state(project.stack, project.project_id)
    got = alice.api.http.post("/v1/messages", json={
        "to": ["Bob"], "subject": "Claim", "body_md": "x", "thread_id": thread_id})
    assert got.status_code == 404, got.text
    assert got.json()["persisted"] is False
    assert got.json()["error"]["code"] == "NOT_FOUND"
    assert project_state(project.stack, project.project_id) == before
    human = project.admin.http.post(f"/v1/projects/{project.project_id}/messages", json={
        "to": ["Bob"], "subject": "Claim", "body_md": "x", "thread_id": thread_id})
    assert human.status_code == 404, human.text
    assert bob.api.inbox()["messages"] == []


def test_an_agent_cannot_claim_a_thread_id_before_it_exists(project: Project):
    alice, bob, mallory = (project.agent(n) for n in ("Alice", "Bob", "Mallory"))
    # Mallory cannot pre-claim the id Alice's next thread would have, nor any other
    # well-known one: only the server mints thread ids, as each thread's first message.
    for claimed in ("release-plan", ids.new_message_id(project.project_id)):
        assert _post_in(mallory, claimed, to="Bob") == 404
    started = alice.api.send("Bob", "Release plan", "x")
    assert started["thread_id"] == started["id"]
    assert _post_in(bob, started["thread_id"]) == 201
    assert [m["subject"] for m in alice.api.thread(started["thread_id"])] == [
        "Release plan", "In the thread"]
    assert _post_in(mallory, started["thread_id"], to="Bob") == 404


def test_a_reply_goes_to_the_original_sender_even_after_a_newer_namesake(project: Project):
    old_alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = old_alice.api.send("Bob", "Plan", "x")
    new_alice = project.agent("Alice")
    assert recipients_of(bob.api.send("Alice", "Hello", "x")) == [new_alice.id]
    reply = bob.api.reply(sent["id"], "ok")
    assert recipients_of(reply) == [old_alice.id] and reply["to"] == [old_alice.label]


def test_a_reply_to_a_reply_is_never_re_re(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Plan", "x")
    reply = bob.api.reply(sent["id"], "1")
    again = alice.api.reply(reply["id"], "2")
    assert (reply["subject"], again["subject"]) == ("Re: Plan", "Re: Plan")
    assert recipients_of(again) == [bob.id] and again["thread_id"] == sent["id"]


@pytest.mark.parametrize(("given", "importance", "ack"), [
    ({}, "urgent", True),
    ({"importance": "low", "ack_required": False}, "low", False),
])
def test_a_reply_inherits_importance_and_ack_unless_given(
        project: Project, given: Json, importance: str, ack: bool):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Plan", "x", importance="urgent", ack_required=True)
    reply = bob.api.reply(sent["id"], "ok", **given)
    assert (reply["importance"], reply["ack_required"]) == (importance, ack)


def test_a_bcc_recipient_may_reply_to_the_sender(project: Project):
    alice, _, dave = project.agent("Alice"), project.agent("Bob"), project.agent("Dave")
    sent = alice.api.send("Bob", "Plan", "x", bcc=["Dave"])
    reply = dave.api.reply(sent["id"], "seen")
    assert recipients_of(reply) == [alice.id] and reply["bcc"] == []


def test_a_thread_lists_what_the_caller_may_see_oldest_first(project: Project):
    alice, bob, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    first = alice.api.send("Bob", "Plan", "x")
    second = bob.api.reply(first["id"], "ok")
    aside = alice.api.send("Carol", "Between us", "x", thread_id=first["thread_id"])
    third = alice.api.reply(second["id"], "thanks")
    everything = [first["id"], second["id"], aside["id"], third["id"]]

    assert [m["id"] for m in alice.api.thread(first["thread_id"])] == everything
    assert [m["id"] for m in bob.api.thread(first["thread_id"])] == [
        first["id"], second["id"], third["id"]]
    assert [m["id"] for m in carol.api.thread(first["thread_id"])] == [aside["id"]]
    assert [m["id"] for m in project.admin.thread(first["thread_id"])] == everything


def test_an_unknown_thread_is_not_found(project: Project):
    alice = project.agent("Alice")
    not_found(alice.api.thread, "no-such-thread")


def test_a_thread_is_read_in_pages_that_neither_skip_nor_repeat(project: Project):
    alice, bob, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    first = alice.api.send("Bob", "Plan", "x")
    tid = first["thread_id"]
    posts = [first["id"]]
    for n in range(6):
        poster, to = (bob, "Alice") if n % 2 else (alice, "Bob")
        posts.append(poster.api.send(to, f"step {n}", "x", thread_id=tid)["id"])
        if n == 2:  # one Bob may not see: his pages skip it, never end early for it
            alice.api.send("Carol", "aside", "x", thread_id=tid)

    pages = []
    cursor = None
    while True:
        page = bob.api.thread_page(tid, cursor=cursor, limit=3)
        pages.append([m["id"] for m in page["messages"]])
        cursor = page["next_cursor"]
        if not page["more"]:
            break
    assert pages == [posts[:3], posts[3:6], posts[6:]]
    assert [m["subject"] for m in carol.api.thread(tid)] == ["aside"]

    # The last page's cursor, passed back, gives what was posted since.
    assert bob.api.thread_page(tid, cursor=cursor)["messages"] == []
    later = alice.api.send("Bob", "later", "x", thread_id=tid)
    after = bob.api.thread_page(tid, cursor=cursor)
    assert [m["id"] for m in after["messages"]] == [later["id"]] and not after["more"]
    assert [m["id"] for m in bob.api.thread(tid)] == [*posts, later["id"]]


def test_a_thread_page_holds_at_most_4_mib_of_messages(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = "long " * 200_000  # 1,000,000 bytes: four fit in 4 MiB, five do not
    first = alice.api.send("Bob", "Long", body)
    for _ in range(6):
        alice.api.send("Bob", "Long", body, thread_id=first["thread_id"])
    sizes, cursor, more = [], None, True
    while more:
        page = bob.api.thread_page(first["thread_id"], cursor=cursor, limit=500)
        sizes.append(len(page["messages"]))
        cursor, more = page["next_cursor"], page["more"]
    assert sizes == [4, 3]


@pytest.mark.parametrize("params", [{"cursor": "next"}, {"cursor": "-1"}, {"limit": "0"},
                                    {"limit": "501"}, {"limit": "ten"}])
def test_a_bad_thread_page_is_invalid_and_named(project: Project, params: Json):
    alice = project.agent("Alice")
    sent = alice.api.send("Alice", "Self", "x")
    with pytest.raises(CourierAPIError) as caught:
        alice.api.request("GET", f"/v1/threads/{sent['thread_id']}", params=params)
    assert (caught.value.status, caught.value.code) == (422, "INVALID_ARGUMENT")
    assert caught.value.details["field"] == next(iter(params))


# deliveries


def test_message_deliveries_list_every_recipient_for_the_sender_and_the_project(
        project: Project):
    alice, bob, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    sent = alice.api.send("Bob", "Hi", "x", cc=["Carol"])
    arrived(project, bob, 1)
    arrived(project, carol, 1)
    bob.api.inbox()
    for reader in (alice.api, project.admin):
        rows = {d["agent_id"]: d for d in reader.message_deliveries(sent["id"])}
        assert set(rows) == {bob.id, carol.id}
        assert rows[bob.id]["stage"] == "delivery_observed"
        assert rows[carol.id]["stage"] == "provider_result_recorded"
        assert rows[bob.id]["recipient"] == bob.label
        assert rows[bob.id]["message_id"] == sent["id"]
        assert (rows[bob.id]["transport"], rows[bob.id]["outcome"]) == ("inbox", "accepted")
        assert list(rows[carol.id]["stages"]) == [
            "admitted", "target_selected", "dispatch_started", "provider_result_recorded"]
        assert all(TS_RE.match(ts) for ts in rows[carol.id]["stages"].values())


def test_reading_deliveries_changes_nothing(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x")
    arrived(project, bob, 1)
    [obs] = sent["delivery"]["observations"]
    first = alice.api.delivery(obs["delivery_id"])
    for _ in range(3):
        assert alice.api.message_deliveries(sent["id"]) == [first]
        assert bob.api.delivery(obs["delivery_id"]) == first


# history after retire and close


@pytest.mark.parametrize("action", ["retire_agent", "close_agent"])
def test_retire_and_close_revoke_the_token_and_keep_history_readable(project: Project,
                                                                      action: str):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Hi", "x")
    reply = bob.api.reply(sent["id"], "ok")
    arrived(project, bob, 1)
    getattr(project.admin, action)(project.project_id, bob.id)

    with pytest.raises(CourierAPIError) as caught:
        bob.api.inbox()
    assert caught.value.status == 401
    assert project.admin.get_message(sent["id"])["body_md"] == "x"
    assert [m["id"] for m in project.admin.thread(sent["thread_id"])] == [sent["id"], reply["id"]]
    assert alice.api.get_message(reply["id"])["from"] == bob.label
    assert [d["agent_id"] for d in alice.api.message_deliveries(sent["id"])] == [bob.id]


# the agent list


def test_agent_rows_carry_name_ref_labels_and_no_secrets(project: Project):
    alice = project.agent("Alice")
    older = project.agent("API review", bound_source={"kind": "t3", "thread_id": "th-9"})
    newer = project.agent("API review")
    older.api.set_presence("busy")

    rows = {r["agent_id"]: r for r in alice.api.list_agents(project.project_id)}

    assert set(rows) == {alice.id, older.id, newer.id}
    for agent in (alice, older, newer):
        row = rows[agent.id]
        assert re.fullmatch(r"[0-9a-f]{6}", row["ref"])
        assert row["label"] == f"{row['name']} [{row['ref']}]" == agent.label
        assert row["status"] == "active" and row["transport"] == {"kind": "inbox"}
        assert TS_RE.match(row["last_active_ts"])
        assert "token" not in row
    assert rows[older.id]["ref"] != rows[newer.id]["ref"]
    assert rows[older.id]["presence"] == "busy"
    assert rows[older.id]["bound_source"] == {"kind": "t3", "thread_id": "th-9"}
    assert rows[newer.id]["bound_source"] is None


def test_agent_rows_show_retired_and_closed_agents(project: Project):
    bob, carol = project.agent("Bob"), project.agent("Carol")
    project.admin.retire_agent(project.project_id, bob.id)
    project.admin.close_agent(project.project_id, carol.id)
    rows = {r["agent_id"]: r["status"] for r in project.admin.list_agents(project.project_id)}
    assert rows == {bob.id: "retired", carol.id: "closed"}


def test_presence_moves_last_active_forward(project: Project):
    bob = project.agent("Bob")
    before = bob.row["last_active_ts"]
    row = bob.api.set_presence("idle")
    assert row["presence"] == "idle" and row["last_active_ts"] > before
