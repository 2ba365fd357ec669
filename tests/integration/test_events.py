"""The live event stream (docs/http-api.md: Reading, ``GET /v1/agents/me/events``) over real HTTP.

New mail as ``message`` events (``wake`` false for quiet mail), idle notices,
the delivery changes of one's own sends, and resuming with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from messaging.client import CourierClient, Event, parse_events
from messaging.service.caller import Caller, CallerKind
from messaging.service.events import Hub
from messaging.store import keys
from messaging.store.store import Store
from tests.integration.conftest import Agent, Project
from tests.stack import wait_until

Json = dict[str, Any]
WAIT_S = 15.0
# Far above the wait for an event, far below the test timeout.
READ_TIMEOUT_S = 20.0
BOUND = {"bound_source": {"kind": "t3", "thread_id": "thr-7"}}


class Listener:
    """Reads ``count`` events of one agent's stream in a thread, on its own connection."""

    def __init__(self, project: Project, agent: Agent, count: int,
                 last_event_id: str | None = "0") -> None:
        self.events: queue.Queue[Event | BaseException] = queue.Queue()
        self.client = CourierClient(project.stack.api_url, agent.row["token"])
        self.thread = threading.Thread(target=self._run, args=(count, last_event_id),
                                       daemon=True)
        self.thread.start()

    def _run(self, count: int, last_event_id: str | None) -> None:
        try:
            stream = self.client.events(last_event_id, read_timeout_s=READ_TIMEOUT_S)
            try:
                for n, event in enumerate(stream, 1):
                    self.events.put(event)
                    if n == count:
                        break
            finally:
                stream.close()
        except BaseException as exc:  # handed to the test thread
            self.events.put(exc)
        finally:
            self.client.close()

    def take(self, count: int) -> list[Event]:
        """The next ``count`` events (fails after WAIT_S without one)."""
        out = []
        for _ in range(count):
            item = self.events.get(timeout=WAIT_S)
            if isinstance(item, BaseException):
                raise item
            out.append(item)
        return out

    def join(self) -> None:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()


@pytest.fixture
def listeners() -> Iterator[list[Listener]]:
    made: list[Listener] = []
    yield made
    for listener in made:
        listener.thread.join(READ_TIMEOUT_S + 5)


def listen(made: list[Listener], project: Project, agent: Agent, count: int,
           last_event_id: str | None = "0") -> Listener:
    listener = Listener(project, agent, count, last_event_id)
    made.append(listener)
    return listener


def stream_ids(project: Project, agent: Agent) -> list[str]:
    """The entry ids of the agent's stream, read from the store."""
    with project.stack.redis() as r:
        return [eid for eid, _ in r.xrange(keys.events(project.project_id, agent.id))]


def test_new_mail_is_a_message_event_that_wakes_and_observes_nothing(
        project: Project, listeners: list[Listener]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bob_events = listen(listeners, project, bob, 1)
    sent = alice.api.send("Bob", "Review", "# Review `auth.py`\n", importance="high")

    (event,) = bob_events.take(1)
    assert event.event == "message" and event.id == stream_ids(project, bob)[0]
    data = event.data
    assert (data["id"], data["body_md"], data["wake"], data["notification_policy"]) == (
        sent["id"], "# Review `auth.py`\n", True, "wake")
    assert data["delivery_id"] == sent["delivery"]["observations"][0]["delivery_id"]
    assert "summary" not in data and data["read_ts"] is None
    # A stream carries mail to a host, which may or may not show it: streaming it
    # records the transport's outcome and no observation.
    wait_until(lambda: alice.api.delivery(data["delivery_id"])["outcome"] == "accepted",
               timeout_s=5, what="the delivery accepted")
    assert alice.api.delivery(data["delivery_id"])["observed_ts"] is None


def test_quiet_mail_is_a_message_event_that_does_not_wake(
        project: Project, listeners: list[Listener]):
    alice, bob = project.agent("Alice"), project.agent("Bob", **BOUND)
    bob_events = listen(listeners, project, bob, 1)
    sent = alice.api.send("Bob", "FYI", "x")
    assert sent["notification_policy"] == "quiet"
    (event,) = bob_events.take(1)
    assert (event.event, event.data["id"], event.data["wake"]) == ("message", sent["id"], False)


def test_an_idle_notice_is_an_event_that_wakes(project: Project, listeners: list[Listener]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    alice_events = listen(listeners, project, alice, 2)
    bob.api.set_presence("idle")
    sub = alice.api.subscribe_idle("Bob")
    notice, mail = alice_events.take(2)
    assert (notice.event, notice.data["subscription_id"], notice.data["state"],
            notice.data["wake"]) == ("idle_notice", sub["subscription_id"], "idle", True)
    assert (mail.event, mail.data["from"], mail.data["id"]) == (
        "message", "courier", notice.data["message_id"])


def test_the_sender_sees_its_delivery_change_stage(project: Project, listeners: list[Listener]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    alice_events = listen(listeners, project, alice, 2)
    sent = alice.api.send("Bob", "Handoff", "x")
    did = sent["delivery"]["observations"][0]["delivery_id"]
    (recorded,) = alice_events.take(1)
    wait_until(lambda: bob.api.inbox()["messages"], what="the message in Bob's inbox")
    (observed,) = alice_events.take(1)
    assert [(e.event, e.data["delivery_id"], e.data["stage"]) for e in (recorded, observed)] == [
        ("delivery", did, "provider_result_recorded"), ("delivery", did, "delivery_observed")]
    assert recorded.data["outcome"] == "accepted" and recorded.data["recipient"] == bob.label


def test_a_stream_resumed_with_last_event_id_loses_and_repeats_nothing(
        project: Project, listeners: list[Listener]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    first = listen(listeners, project, bob, 3)
    sent = [alice.api.send("Bob", f"Part {n}", f"part {n}")["id"] for n in range(6)]
    before = first.take(3)
    first.join()  # disconnected; the rest arrives while no one listens
    wait_until(lambda: len(stream_ids(project, bob)) == 6, what="six events in Bob's stream")

    after = listen(listeners, project, bob, 3, last_event_id=before[-1].id).take(3)

    received = before + after
    assert [e.id for e in received] == stream_ids(project, bob)
    assert sorted(e.data["id"] for e in received) == sorted(sent)


def test_without_last_event_id_the_stream_starts_at_the_newest_event(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    alice.api.send("Bob", "Old", "x")
    wait_until(lambda: stream_ids(project, bob), what="the old message's event")
    auth = {"Authorization": f"Bearer {bob.row['token']}"}
    with httpx.Client(base_url=project.stack.api_url, headers=auth,
                      timeout=httpx.Timeout(10, read=READ_TIMEOUT_S)) as http, \
            http.stream("GET", "/v1/agents/me/events") as response:
        lines = response.iter_lines()
        assert next(lines).startswith(": courier events after ")  # the position is fixed
        new = alice.api.send("Bob", "New", "y")
        event = next(parse_events(lines))
    assert (event.event, event.data["id"]) == ("message", new["id"])


@pytest.mark.parametrize(("header", "status", "code"), [
    ({"Last-Event-ID": "not-an-id"}, 422, "INVALID_ARGUMENT"),
    ({"Authorization": ""}, 401, "UNAUTHENTICATED"),
])
def test_a_bad_request_for_the_stream_is_refused_in_the_api_shape(
        project: Project, header: dict[str, str], status: int, code: str):
    bob = project.agent("Bob")
    response = bob.api.http.get("/v1/agents/me/events", headers=header)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)


def test_a_project_token_has_no_event_stream(project: Project):
    response = httpx.get(f"{project.stack.api_url}/v1/agents/me/events",
                         headers={"Authorization": f"Bearer {project.token}"})
    assert (response.status_code, response.json()["error"]["code"]) == (403, "FORBIDDEN")


def test_resuming_past_trimmed_events_says_to_resync_from_the_inbox(
        project: Project, listeners: list[Listener]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    for n in range(3):
        alice.api.send("Bob", f"Part {n}", "x")
    wait_until(lambda: len(stream_ids(project, bob)) == 3, what="three events in Bob's stream")
    first = stream_ids(project, bob)[0]
    with project.stack.redis() as r:  # what the stream's MAXLEN does to old entries
        r.xtrim(keys.events(project.project_id, bob.id), maxlen=1, approximate=False)

    resync, kept = listen(listeners, project, bob, 2, last_event_id=first).take(2)
    assert (resync.event, resync.id, resync.data["after"]) == ("resync", None, first)
    assert (kept.event, kept.id) == ("message", stream_ids(project, bob)[0])


def test_an_agent_s_streams_share_one_rendering_of_each_message(project: Project):
    """Each stream of an agent shows a new message; the API reads and records it once."""
    alice, listener = project.agent("Alice"), project.agent("Listener")
    sent = alice.api.send("Listener", "Plan", "step *one*")
    caller = Caller(CallerKind.AGENT, project.project_id, listener.id)

    async def four_streams() -> tuple[list[str], int]:
        store = Store.from_url(project.stack.store.url)
        hub = Hub(store)
        reads = 0
        read_message = store.get_message

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return await read_message(*args, **kwargs)

        store.get_message = counted  # type: ignore[method-assign]
        try:
            entries: list[tuple[str, Any]] = []
            for _ in range(100):  # the worker writes the entry as it delivers
                found = await store.live.read_events(project.project_id,
                                                     {listener.id: "0-0"}, 10, None)
                entries = [(e, f) for e, f in found.get(listener.id, [])
                           if f.get("type") == "message"]
                if entries:
                    break
                await asyncio.sleep(0.1)
            ((entry_id, fields),) = entries
            shown = await asyncio.gather(*(hub.render(caller, entry_id, fields)
                                           for _ in range(4)))
        finally:
            await store.close()
        return [event.data for event in shown], reads

    shown, reads = asyncio.run(four_streams())
    assert reads == 1
    assert len(set(shown)) == 1 and json.loads(shown[0])["id"] == sent["id"]
