"""Webhook settings that cannot be used are refused at registration, and checked again
at dispatch: what fails before a request leaves is `failed`, never `unknown`."""

from __future__ import annotations

import base64
import json
import socket
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from messaging import transports
from messaging.client import CourierAPIError
from messaging.config import Settings
from messaging.store import keys
from messaging.store.deliveries import DeliveryStore
from messaging.transports.base import Delivery, OutcomeKind
from messaging.transports.webhook import WebhookTransport
from tests.receiver import Receiver
from tests.stack import Stack, make_stack, wait_until


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API allows loopback; the worker's allow-list was narrowed since (no loopback)."""
    s = make_stack(tmp_path_factory.mktemp("rules"), webhook_timeout_s="1",
                   webhook_retry_schedule_s="0.2", webhook_lease_margin_s="0.5")
    try:
        s.start_worker(queues="deliver.inbox,deliver.webhook,courier.sweep", concurrency=2,
                       env={"COURIER_WEBHOOK_ALLOW": "10.0.0.0/8"})
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
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        self.project_id = p["project_id"]
        self.admin = stack.client(p["token"])
        alice = self.admin.register_agent(self.project_id, "Alice")
        self.alice = stack.client(alice["token"])

    def refused(self, transport: dict[str, Any]) -> CourierAPIError:
        before = self.admin.list_agents(self.project_id)
        with pytest.raises(CourierAPIError) as e:
            self.admin.register_agent(self.project_id, "Hook", transport)
        assert (e.value.status, e.value.code) == (422, "INVALID_ARGUMENT")
        assert e.value.body["persisted"] is False
        assert self.admin.list_agents(self.project_id) == before, "no agent created"
        return e.value

    def send(self, to: str) -> str:
        sent = self.alice.send([to], "Handoff", "# Take it\n")
        return str(sent["delivery"]["observations"][0]["delivery_id"])

    def settled(self, did: str, timeout_s: float = 15) -> dict[str, Any]:
        return wait_until(lambda: (d := self.admin.delivery(did))["outcome"] and d,
                          timeout_s, 0.05, f"an outcome for {did}")

    def close(self) -> None:
        self.admin.close()
        self.alice.close()


@pytest.fixture
def world(narrow: Stack) -> Iterator[World]:
    w = World(narrow)
    yield w
    w.close()


GOOD_URL = "http://127.0.0.1:9/hook"


@pytest.mark.parametrize(("transport", "field"), [
    ({"secret": "whsec_not base64!!"}, "transport.secret"),
    ({"secret": "whsec_"}, "transport.secret"),
    ({"secret": "whsec_" + base64.b64encode(b"x" * 16).decode()}, "transport.secret"),
    ({"secret": "whsec_" + base64.b64encode(b"x" * 65).decode()}, "transport.secret"),
    ({"secret": "too-short"}, "transport.secret"),
    ({"secret": "tab\tinside-a-secret-of-24-chars"}, "transport.secret"),
    ({"url": "http://127.0.0.1:9/a\nb"}, "transport.url"),
    ({"url": "http://user:pw@127.0.0.1:9/hook"}, "transport.url"),
    ({"url": "ftp://127.0.0.1:9/hook"}, "transport.url"),
    ({"url": "http://127.0.0.1:notaport/hook"}, "transport.url"),
    ({"url": "http://203.0.113.7/hook"}, "transport.url"),
    ({"unknown": 1}, "transport.unknown"),
])
def test_unusable_webhook_settings_are_refused_at_registration(
        world: World, transport: dict[str, Any], field: str):
    error = world.refused({"kind": "webhook", "url": GOOD_URL, **transport})
    assert error.details["field"] == field
    assert "pw@" not in json.dumps(error.body)


def test_a_webhook_at_the_stores_own_port_is_refused_at_registration(world: World):
    port = urlsplit(world.stack.store.url).port
    for host in ("127.0.0.1", "127.0.0.2", "[::1]"):
        error = world.refused({"kind": "webhook", "url": f"http://{host}:{port}/"})
        assert error.details["field"] == "transport.url"
        assert "Courier's own" in str(error)


def test_a_webhook_at_the_apis_own_port_is_refused_at_registration(world: World):
    port = urlsplit(world.stack.api_url).port
    for host in ("127.0.0.1", "127.0.0.2", "[::1]"):
        error = world.refused({"kind": "webhook", "url": f"http://{host}:{port}/v1/agents"})
        assert error.details["field"] == "transport.url"
        assert "Courier's own" in str(error)


def test_the_request_goes_to_the_address_checked_not_to_a_second_answer(
        monkeypatch: pytest.MonkeyPatch):
    # A resolver that answers the check with one address and any later lookup
    # with another (DNS rebinding): the POST must reach the address checked.
    checked = Receiver(host="127.0.0.1")
    checked.start()
    rebound = Receiver(host="127.0.0.2", port=checked.server.server_address[1])
    rebound.start()
    answers = iter(["127.0.0.1"] + ["127.0.0.2"] * 10)
    real = socket.getaddrinfo

    def rebinding(host: str, port: Any, *args: Any, **kw: Any) -> Any:
        if host == "hooks.example":
            return real(next(answers), port, *args, **kw)
        return real(host, port, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    courier = Settings(webhook_allow="hooks.example")
    url = f"http://hooks.example:{checked.server.server_address[1]}/hook"
    try:
        transport = WebhookTransport(courier)
        hook = transports.parse("webhook", {"kind": "webhook", "url": url}, courier)
        outcome = transport.deliver(Delivery("dlv_x", 1, "prj_x", {}, hook, {"id": "msg_x"}))
        assert outcome.kind == OutcomeKind.ACCEPTED
        assert checked.count("/hook") == 1 and rebound.count("/hook") == 0
        assert checked.requests("/hook")[0].headers["host"] == urlsplit(url).netloc
    finally:
        checked.stop()
        rebound.stop()


def test_good_secrets_are_accepted_and_a_missing_one_is_generated_and_shown_once(world: World):
    given = "whsec_" + base64.b64encode(b"k" * 24).decode()
    row = world.admin.register_agent(world.project_id, "Given",
                                     {"kind": "webhook", "url": GOOD_URL, "secret": given})
    assert row["transport"]["secret"] == given
    row = world.admin.register_agent(world.project_id, "Raw", {
        "kind": "webhook", "url": GOOD_URL, "secret": "twenty-four printable ch"})
    made = world.admin.register_agent(world.project_id, "Made",
                                      {"kind": "webhook", "url": GOOD_URL})
    secret = made["transport"]["secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    listed = json.dumps(world.admin.list_agents(world.project_id))
    assert secret not in listed and given not in listed and GOOD_URL not in listed


def test_a_url_the_worker_no_longer_allows_is_failed_at_dispatch_never_sent(
        world: World, receiver: Receiver):
    path = f"/{uuid.uuid4().hex}"
    world.admin.register_agent(world.project_id, "Narrowed",
                               {"kind": "webhook", "url": receiver.url(path)})
    d = world.settled(world.send("Narrowed"))
    assert d["outcome"] == "failed"
    assert [a["n"] for a in d["attempts"]] == [1]
    assert "COURIER_WEBHOOK_ALLOW" in d["attempts"][0]["error"]
    assert receiver.count(path) == 0


def _store_agent(world: World, name: str, transport: dict[str, Any]) -> None:
    """Rewrite a registered agent's transport in the store, as an older Courier (with looser
    rules) would have stored it."""
    row = world.admin.register_agent(world.project_id, name, {"kind": "webhook", "url": GOOD_URL})
    with world.stack.redis() as r:
        agent = json.loads(r.hget(keys.agents(world.project_id), row["agent_id"]))
        agent["transport"] = {"kind": "webhook", **transport}
        r.hset(keys.agents(world.project_id), row["agent_id"], json.dumps(agent))


@pytest.mark.parametrize("transport", [
    {"url": GOOD_URL, "secret": "whsec_not base64!!"},
    {"url": GOOD_URL, "secret": "whsec_"},
    {"url": "http://127.0.0.1:9/a\nb", "secret": "twenty-four printable ch"},
    {"url": "STORE", "secret": "twenty-four printable ch"},
    {"url": "http://user:hunter2@127.0.0.1:9/", "secret": "twenty-four printable ch"},
])
def test_stored_settings_that_cannot_be_used_end_failed_not_unknown(
        world: World, transport: dict[str, Any]):
    if transport["url"] == "STORE":
        transport = {**transport, "url": f"http://127.0.0.1:{urlsplit(world.stack.store.url).port}/"}
    _store_agent(world, "Stale", transport)
    d = world.settled(world.send("Stale"))
    assert d["outcome"] == "failed", d
    assert len(d["attempts"]) == 1 and d["attempts"][0]["error"].startswith("not sent:")
    assert "hunter2" not in json.dumps(d)
    logs = "".join(p.log.read_text(errors="replace") for p in world.stack.procs)
    assert "hunter2" not in logs


@pytest.mark.slow
def test_a_lease_that_runs_out_before_hand_off_is_failed_after_it_unknown(
        tmp_path_factory: pytest.TempPathFactory):
    """A worker that stopped between lease and request sent nothing: `failed`. One that
    stopped after marking the hand-off may have sent it: `unknown`."""
    stack = make_stack(tmp_path_factory.mktemp("expiry"))
    store = DeliveryStore.from_url(stack.store.url)
    try:
        stack.start_worker(queues="courier.sweep", concurrency=1)  # the sweeper, no deliveries
        world = World(stack)
        world.admin.register_agent(world.project_id, "Quiet", {"kind": "webhook", "url": GOOD_URL})
        dids = [world.send("Quiet"), world.send("Quiet")]
        leased = [store.lease(world.project_id, [did], 300, False) for did in dids]
        assert [len(x) for x in leased] == [1, 1]
        assert store.mark_handed_off(world.project_id, leased[1][0])
        first, second = (world.settled(did) for did in dids)
        assert first["outcome"] == "failed"
        assert first["attempts"][-1]["error"].startswith("not sent:")
        assert second["outcome"] == "unknown"
        world.close()
    finally:
        store.client.close()
        stack.stop()
