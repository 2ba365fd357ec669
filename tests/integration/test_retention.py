"""Retention: final, old messages are archived, then removed with all that refers to them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from messaging.client import CourierAPIError, CourierClient
from messaging.service import archive
from messaging.store import keys
from tests.receiver import Receiver
from tests.stack import ROOT, Stack, make_stack, project_state, wait_until

RETENTION_S = 5.0
RETENTION_DAYS = RETENTION_S / 86_400
# Time for a message past its retention to be archived and removed (rounds run every 0.3 s).
REMOVAL_TIMEOUT_S = RETENTION_S + 12


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack that keeps final mail a few seconds; a worker for every queue, with beat."""
    s = make_stack(tmp_path_factory.mktemp("retention"), retention_days=repr(RETENTION_DAYS),
                   retention_interval_s="0.3", webhook_retry_schedule_s="600")
    try:
        s.start_worker(queues="deliver.inbox,deliver.webhook,courier.sweep")
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.start()
    yield r
    r.stop()


class World:
    """A project with agents Alice and Bob (inboxes) and their clients."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        self.project_id = p["project_id"]
        self.admin = stack.client(p["token"])
        self.clients = [self.admin]
        self.alice = self.agent("Alice")
        self.bob = self.agent("Bob")

    def agent(self, name: str, transport: dict[str, Any] | None = None) -> CourierClient:
        row = self.admin.register_agent(self.project_id, name, transport)
        c = self.stack.client(row["token"])
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            c.close()


@pytest.fixture
def world(kept: Stack) -> Iterator[World]:
    w = World(kept)
    yield w
    w.close()


def gone(client: CourierClient, message_id: str) -> bool:
    """True once the message answers 410 ARCHIVED."""
    try:
        client.get_message(message_id)
    except CourierAPIError as e:
        assert (e.status, e.code) == (410, "ARCHIVED"), e
        return True
    return False


def accepted(client: CourierClient, delivery_id: str) -> bool:
    return client.delivery(delivery_id)["outcome"] == "accepted"


def send(w: World, subject: str, **fields: Any) -> dict[str, Any]:
    sent: dict[str, Any] = w.alice.send(["Bob"], subject, f"# {subject}\n", **fields)
    return sent


def delivery_id(sent: dict[str, Any]) -> str:
    return str(sent["delivery"]["observations"][0]["delivery_id"])


@pytest.mark.slow
def test_final_old_messages_are_archived_and_removed_with_everything(world: World,
                                                                     kept: Stack) -> None:
    first = send(world, "Handoff")
    reply = world.bob.reply(first["id"], "Taken.\n")
    for m in (first, reply):
        wait_until(lambda m=m: accepted(world.admin, delivery_id(m)), what="delivery")
    assert [m["id"] for m in world.bob.inbox()["messages"]] == [first["id"]]  # observed
    world.bob.acknowledge(first["id"])
    wait_until(lambda: world.bob.search("Handoff")["messages"], what="the search index")
    ids = {first["id"], reply["id"], delivery_id(first), delivery_id(reply)}
    wait_until(lambda: gone(world.alice, first["id"]) and gone(world.alice, reply["id"]),
               REMOVAL_TIMEOUT_S, 0.2, "removal")

    # Nothing in the store names them any more: no message, delivery, inbox,
    # thread or event entry; only the 410 answers remember the ids.
    state = project_state(kept, world.project_id)
    for key, (_kind, content) in state.items():
        if key.startswith(keys.archived(world.project_id, "")):
            assert set(content) == ids
            continue
        text = json.dumps(content)
        assert not any(i in key or i in text for i in ids), key
    assert keys.thread(world.project_id, first["thread_id"]) not in state
    # Nor do their words stay in the word list prefixes expand over.
    assert keys.search_words(world.project_id) not in state

    for call in (lambda: world.bob.get_message(reply["id"]),
                 lambda: world.alice.delivery(delivery_id(first)),
                 lambda: world.admin.message_deliveries(first["id"]),
                 lambda: world.bob.mark_read(first["id"])):
        with pytest.raises(CourierAPIError) as err:
            call()
        assert (err.value.status, err.value.code) == (410, "ARCHIVED")
        assert err.value.details["archive_day"] == archive.day_of(time.time_ns() // 1000)
    assert world.bob.inbox()["messages"] == []
    assert world.bob.search("Handoff")["messages"] == []
    with pytest.raises(CourierAPIError) as err:
        world.alice.thread(first["thread_id"])
    assert err.value.status == 404

    # The archive holds both, each with its deliveries and their stages.
    day = archive.day_of(time.time_ns() // 1000)
    root = Path(kept.env["COURIER_DATA_DIR"]) / "archive"
    lines = {m["id"]: m for m in archive.read(root, world.project_id, day)}
    assert set(lines) == {first["id"], reply["id"]}
    original = lines[first["id"]]
    assert original["body_md"] == "# Handoff\n" and original["from"] == first["from"]
    [d] = original["deliveries"]
    assert d["delivery_id"] == delivery_id(first) and d["outcome"] == "accepted"
    assert set(d["stages"]) >= {"admitted", "target_selected", "dispatch_started",
                                "provider_result_recorded", "delivery_observed"}
    assert d["ack_ts"] is not None

    # ... and reads back for a person.
    shown = subprocess.run(
        [sys.executable, "-m", "messaging.cli", "archive", world.project_id, "--day", day],
        cwd=ROOT, env=kept.env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "Handoff" in shown and "Re: Handoff" in shown and "accepted" in shown


def _status(call: Any, *args: Any) -> tuple[int, str]:
    try:
        call(*args)
    except CourierAPIError as e:
        return e.status, e.code
    raise AssertionError("a removed message was found again")


def test_only_those_who_could_see_an_archived_message_learn_it_was_archived(
        world: World) -> None:
    carol = world.agent("Carol")
    row = world.admin.register_agent(world.project_id, "Guarded", inbound="hold")
    guarded = world.stack.client(row["token"])
    world.clients.append(guarded)
    sent = world.alice.send(["Bob"], "Private", "x", cc=["Guarded"])
    bob_did, guarded_did = (o["delivery_id"] for o in sent["delivery"]["observations"])
    world.admin.decline(guarded_did)  # Guarded never saw it
    wait_until(lambda: accepted(world.admin, bob_did), what="delivery")
    wait_until(lambda: gone(world.alice, sent["id"]), REMOVAL_TIMEOUT_S, 0.2, "removal")
    for reader in (world.alice, world.bob, world.admin):  # sender, recipient, project
        assert _status(reader.get_message, sent["id"]) == (410, "ARCHIVED")
        assert _status(reader.message_deliveries, sent["id"]) == (410, "ARCHIVED")
        assert _status(reader.delivery, bob_did) == (410, "ARCHIVED")
    assert _status(world.alice.delivery, guarded_did) == (410, "ARCHIVED")
    # a bystander, and a recipient the message was withheld from, learn nothing
    for reader in (carol, guarded):
        for call in (reader.get_message, reader.message_deliveries, reader.mark_read):
            assert _status(call, sent["id"]) == (404, "NOT_FOUND"), call
        for did in (bob_did, guarded_did):
            assert _status(reader.delivery, did) == (404, "NOT_FOUND")
            assert _status(reader.observed, did) == (404, "NOT_FOUND")
    assert _status(world.bob.delivery, guarded_did) == (404, "NOT_FOUND")


@pytest.mark.slow
def test_a_removed_id_answers_410_for_a_retention_period_then_404(world: World,
                                                                   kept: Stack) -> None:
    # The ids kept for 410 answers go from the store in their turn, so a busy
    # project's store does not grow with them (one to two retention periods).
    sent = send(world, "Brief")
    wait_until(lambda: accepted(world.admin, delivery_id(sent)), what="delivery")
    wait_until(lambda: gone(world.alice, sent["id"]), REMOVAL_TIMEOUT_S, 0.2, "removal")
    removed = time.monotonic()
    time.sleep(RETENTION_S * 0.8)
    assert gone(world.alice, sent["id"])  # still a retention period's 410 after removal

    def answers_404() -> bool:
        try:
            world.alice.get_message(sent["id"])
        except CourierAPIError as e:
            return e.status == 404
        raise AssertionError("a removed message was found again")

    wait_until(answers_404, 3 * RETENTION_S + 5, 0.5, "the 410 answer to end")
    assert time.monotonic() - removed >= RETENTION_S
    with pytest.raises(CourierAPIError) as err:
        world.alice.delivery(delivery_id(sent))
    assert err.value.status == 404
    prefix = keys.archived(world.project_id, "")
    assert not [k for k in project_state(kept, world.project_id) if k.startswith(prefix)]


@pytest.mark.slow
def test_recent_activity_keeps_a_message_until_it_is_old(world: World) -> None:
    acked, control = send(world, "Ack me"), send(world, "Control")
    for m in (acked, control):
        wait_until(lambda m=m: accepted(world.admin, delivery_id(m)), what="delivery")
    time.sleep(RETENTION_S * 0.6)
    world.bob.acknowledge(acked["id"])  # activity: its retention starts again
    acked_at = time.monotonic()
    wait_until(lambda: gone(world.alice, control["id"]), REMOVAL_TIMEOUT_S, 0.2, "removal")
    assert world.bob.get_message(acked["id"])["id"] == acked["id"]
    wait_until(lambda: gone(world.bob, acked["id"]), REMOVAL_TIMEOUT_S, 0.2, "removal")
    assert time.monotonic() - acked_at >= RETENTION_S


@pytest.mark.slow
def test_a_retrying_delivery_keeps_its_message_whatever_its_age(world: World,
                                                                receiver: Receiver) -> None:
    path = f"/{uuid.uuid4().hex}"
    receiver.behaviours[path] = lambda n: (503, b"busy")
    world.agent("Hook", {"kind": "webhook", "url": receiver.url(path)})
    waiting = world.alice.send(["Hook"], "Retry me", "# later\n")
    plain = send(world, "Old news")
    wait_until(lambda: receiver.count(path) >= 1, what="the first attempt")
    wait_until(lambda: gone(world.alice, plain["id"]), REMOVAL_TIMEOUT_S, 0.2, "removal")
    time.sleep(RETENTION_S)  # several more rounds, all past its age
    assert world.alice.get_message(waiting["id"])["id"] == waiting["id"]
    d = world.admin.delivery(delivery_id(waiting))
    assert d["outcome"] is None and len(d["attempts"]) == 1


@pytest.mark.slow
def test_inbox_cursor_never_skips_or_repeats_across_a_removal(world: World) -> None:
    sent = [send(world, f"Item {i}") for i in range(8)]
    for m in sent:
        wait_until(lambda m=m: accepted(world.admin, delivery_id(m)), what="delivery")
    # Inbox order is arrival order; two workers may swap neighbours, so the
    # inbox itself is the reference.
    arrived = [m["id"] for m in world.bob.inbox(limit=500)["messages"]]
    assert sorted(arrived) == sorted(m["id"] for m in sent)
    page = world.bob.inbox(limit=2)
    assert [m["id"] for m in page["messages"]] == arrived[:2]
    cursor = page["next_cursor"]
    # Items 3, 5 and 7 are acknowledged later, so they stay when 2, 4 and 6 go.
    time.sleep(RETENTION_S * 0.8)
    keep = [sent[i]["id"] for i in (3, 5, 7)]
    assert not set(keep) & set(arrived[:2]), "a kept item was on the first page"
    for mid in keep:
        world.bob.acknowledge(mid)
    later = [send(world, f"Later {i}") for i in range(3)]
    wait_until(lambda: all(gone(world.alice, sent[i]["id"]) for i in (2, 4, 6)),
               REMOVAL_TIMEOUT_S, 0.2, "removal")
    for m in later:
        wait_until(lambda m=m: accepted(world.admin, delivery_id(m)), what="delivery")
    seen = []
    while True:
        page = world.bob.inbox(cursor=cursor, limit=1)
        if not page["messages"]:
            break
        seen += [m["id"] for m in page["messages"]]
        cursor = page["next_cursor"]
    now_in_inbox = [m["id"] for m in world.bob.inbox(limit=500)["messages"]]
    expected = set(keep) | {m["id"] for m in later}
    assert seen == [mid for mid in now_in_inbox if mid in expected]
    assert len(seen) == len(expected)
    assert world.bob.inbox(cursor=cursor)["messages"] == []


@pytest.mark.slow
def test_mail_a_subagent_sent_under_its_session_s_address_leaves_nothing_behind(
        world: World, kept: Stack) -> None:
    lead = world.admin.register_agent(world.project_id, "Lead")
    sub_row = world.admin.register_agent(world.project_id, "Sub", parent=lead["agent_id"])
    sub = kept.client(sub_row["token"])
    world.clients.append(sub)
    sent = sub.send(["Bob"], "Crossing", "# Crossing\n")
    assert sent["via"] == sub_row["label"]
    wait_until(lambda: accepted(world.admin, delivery_id(sent)), what="delivery")
    wait_until(lambda: sub.search("crossing")["messages"], what="the subagent's search")
    ids = {sent["id"], delivery_id(sent)}
    wait_until(lambda: gone(sub, sent["id"]), REMOVAL_TIMEOUT_S, 0.2, "removal")
    for key, (_kind, content) in project_state(kept, world.project_id).items():
        if not key.startswith(keys.archived(world.project_id, "")):
            assert not any(i in key or i in json.dumps(content) for i in ids), key
