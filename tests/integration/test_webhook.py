"""The webhook transport against a real receiver on loopback (docs/http-api.md, Webhooks)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from messaging.client import CourierAPIError
from tests import npm
from tests.receiver import Receiver
from tests.stack import Stack, free_port, make_stack, wait_until

TIMEOUT_S = 1.0
SCHEDULE = "0.2,0.3,0.4"


@pytest.fixture(scope="module")
def hooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack with a short webhook timeout and retry schedule, one worker for all queues."""
    s = make_stack(tmp_path_factory.mktemp("webhook"), webhook_timeout_s=str(TIMEOUT_S),
                   webhook_retry_schedule_s=SCHEDULE)
    try:
        s.start_worker(queues="deliver.inbox,deliver.webhook,courier.sweep", concurrency=2)
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver(hang_s=TIMEOUT_S * 3)
    r.start()
    yield r
    r.stop()


class World:
    """A project with a sender and helpers to add webhook recipients."""

    def __init__(self, stack: Stack, receiver: Receiver) -> None:
        self.stack, self.receiver = stack, receiver
        self.op = stack.operator()
        p = self.op.create_project(f"/srv/{uuid.uuid4().hex}")
        self.project_id = p["project_id"]
        self.admin = stack.client(p["token"])
        alice = self.admin.register_agent(self.project_id, "Alice")
        self.alice = stack.client(alice["token"])
        self.clients = [self.op, self.admin, self.alice]

    def hook(self, name: str, behaviour=None, url: str | None = None,
             secret: str | None = None) -> tuple[str, dict]:
        path = f"/{uuid.uuid4().hex}"
        if behaviour is not None:
            self.receiver.behaviours[path] = behaviour
        transport = {"kind": "webhook", "url": url or self.receiver.url(path)}
        if secret is not None:
            transport["secret"] = secret
        row = self.admin.register_agent(self.project_id, name, transport)
        return path, row

    def send(self, to: str, **fields) -> str:
        sent = self.alice.send([to], "Handoff", "# Take it\n", **fields)
        return str(sent["delivery"]["observations"][0]["delivery_id"])

    def settled(self, delivery_id: str, timeout_s: float = 15) -> dict:
        return wait_until(lambda: (d := self.admin.delivery(delivery_id))["outcome"] and d,
                          timeout_s, 0.05, f"an outcome for {delivery_id}")

    def close(self) -> None:
        for c in self.clients:
            c.close()


@pytest.fixture
def world(hooks: Stack, receiver: Receiver) -> Iterator[World]:
    w = World(hooks, receiver)
    yield w
    w.close()


@pytest.mark.slow
def test_a_2xx_is_accepted_signed_with_the_delivery_id_and_carries_the_message(world: World):
    path, row = world.hook("Hooky")
    did = world.send("Hooky")
    d = world.settled(did)
    assert d["outcome"] == "accepted" and d["stage"] == "provider_result_recorded"
    [req] = world.receiver.requests(path)
    assert req.headers["webhook-id"] == did
    payload = Webhook(row["transport"]["secret"]).verify(req.body, req.headers)
    assert payload["delivery_id"] == did and payload["body_md"] == "# Take it\n"
    assert payload["notification_policy"] in ("wake", "quiet") and payload["bcc"] == []


def test_a_displayed_reply_records_delivery_observed(world: World):
    world.hook("Shown", lambda n: (200, json.dumps({"displayed": True}).encode()))
    d = world.settled(world.send("Shown"))
    assert d["stage"] == "delivery_observed" and d["observed_ts"]


def test_503_twice_then_200_is_three_attempts_and_accepted(world: World):
    path, _ = world.hook("Flaky", lambda n: (503, b"") if n <= 2 else (200, b"{}"))
    d = world.settled(world.send("Flaky"))
    assert d["outcome"] == "accepted"
    assert [a["n"] for a in d["attempts"]] == [1, 2, 3]
    assert [a.get("error") for a in d["attempts"]] == ["HTTP 503", "HTTP 503", None]
    seen = world.receiver.requests(path)
    assert len(seen) == 3 and {r.headers["webhook-id"] for r in seen} == {d["delivery_id"]}
    # the waits of the schedule lie between the attempts
    assert seen[1].at - seen[0].at >= 0.2 and seen[2].at - seen[1].at >= 0.3


def test_a_4xx_is_rejected_after_one_attempt(world: World):
    path, _ = world.hook("Picky", lambda n: (400, b"{}"))
    d = world.settled(world.send("Picky"))
    assert d["outcome"] == "rejected" and len(d["attempts"]) == 1
    time.sleep(1.0)
    assert world.receiver.count(path) == 1


def test_429_and_5xx_until_the_schedule_ends_is_failed(world: World):
    path, _ = world.hook("Down", lambda n: (429, b"") if n % 2 else (500, b""))
    d = world.settled(world.send("Down"))
    assert d["outcome"] == "failed"
    assert len(d["attempts"]) == len(SCHEDULE.split(",")) + 1 == world.receiver.count(path)


def test_a_refused_connection_is_retried_on_the_same_url_then_failed(world: World):
    _, row = world.hook("Gone", url=f"http://127.0.0.1:{free_port()}/hook")
    d = world.settled(world.send("Gone"))
    assert d["outcome"] == "failed" and len(d["attempts"]) == 4
    assert all("not sent" in a["error"] for a in d["attempts"])


def test_a_webhook_that_hangs_past_the_timeout_is_unknown_after_one_request(world: World):
    path, _ = world.hook("Slow", lambda n: "hang")
    d = world.settled(world.send("Slow"))
    assert d["outcome"] == "unknown" and len(d["attempts"]) == 1
    assert "no whole answer within the" in d["attempts"][0]["error"]
    time.sleep(TIMEOUT_S * 2)
    assert world.receiver.count(path) == 1
    assert len(world.admin.delivery(d["delivery_id"])["attempts"]) == 1


def test_a_task_carries_its_webhooks_at_once_and_records_each_as_it_answers(world: World):
    # One send to four hanging receivers and one quick one: the worker takes
    # them in one task (a batch), sends all five before the first times out,
    # and records the quick answer long before the hanging ones end.
    slow = [world.hook(f"Slow{i}", lambda n: "hang")[0] for i in range(4)]
    world.hook("Quick")
    sent = world.alice.send([*(f"Slow{i}" for i in range(4)), "Quick"], "Handoff", "# All\n")
    started = time.monotonic()
    by_name = {o["recipient"].split(" [")[0]: o["delivery_id"]
               for o in sent["delivery"]["observations"]}
    quick = world.settled(by_name["Quick"], timeout_s=TIMEOUT_S)
    assert quick["outcome"] == "accepted"
    assert time.monotonic() - started < TIMEOUT_S
    assert all(world.admin.delivery(by_name[f"Slow{i}"])["outcome"] is None for i in range(4))
    assert all(world.receiver.count(path) == 1 for path in slow)
    for i in range(4):
        d = world.settled(by_name[f"Slow{i}"])
        assert d["outcome"] == "unknown" and len(d["attempts"]) == 1


def test_a_connection_dropped_after_sending_is_unknown_and_not_retried(world: World):
    path, _ = world.hook("Drop", lambda n: "drop")
    d = world.settled(world.send("Drop"))
    assert d["outcome"] == "unknown" and len(d["attempts"]) == 1
    time.sleep(1.0)
    assert world.receiver.count(path) == 1


def test_redrive_sends_again_with_the_same_webhook_id_and_records_a_new_attempt(world: World):
    path, _ = world.hook("Later", lambda n: "drop" if n == 1 else (200, b"{}"))
    did = world.send("Later")
    assert world.settled(did)["outcome"] == "unknown"
    redriven = world.admin.request("POST", f"/v1/deliveries/{did}/redrive")
    assert redriven["delivery_id"] == did
    d = wait_until(lambda: (x := world.admin.delivery(did))["outcome"] == "accepted" and x,
                   what="the redriven attempt")
    assert [a["n"] for a in d["attempts"]] == [1, 2]
    assert [r.headers["webhook-id"] for r in world.receiver.requests(path)] == [did, did]
    assert d["stage"] == "provider_result_recorded"


def test_each_attempt_keeps_its_times_and_the_stages_follow_the_latest(world: World):
    replies = {1: (503, b""), 2: "drop", 3: "hang"}
    world.hook("Redriven", lambda n: replies.get(n, (200, b"{}")))
    did = world.send("Redriven")

    def same_attempt(d: dict) -> None:
        last = d["attempts"][-1]
        assert d["stages"]["dispatch_started"] == last["started_ts"]
        if last["ended_ts"] is None:
            assert "provider_result_recorded" not in d["stages"]
        else:
            assert d["stages"]["provider_result_recorded"] == last["ended_ts"]

    first = world.settled(did)
    assert [(a["n"], a["outcome"], a["error"]) for a in first["attempts"]] == [
        (1, "retry", "HTTP 503"), (2, "unknown", first["attempts"][1]["error"])]
    assert first["attempts"][1]["error"]
    assert all(a["started_ts"] <= a["ended_ts"] for a in first["attempts"])
    same_attempt(first)

    world.admin.request("POST", f"/v1/deliveries/{did}/redrive")
    running = wait_until(lambda: (x := world.admin.delivery(did))["attempts"][-1]["n"] == 3
                         and x, what="the redriven attempt under way")
    same_attempt(running)
    assert running["stage"] == "provider_result_recorded"  # stages never move back
    second = wait_until(lambda: (x := world.admin.delivery(did))["attempts"][-1]["ended_ts"]
                        and x, what="the redriven attempt's end")
    assert second["outcome"] == "unknown" and second["attempts"][-1]["outcome"] == "unknown"
    same_attempt(second)

    world.admin.request("POST", f"/v1/deliveries/{did}/redrive")
    done = wait_until(lambda: (x := world.admin.delivery(did))["outcome"] == "accepted" and x,
                      what="the second redrive")
    assert [a["outcome"] for a in done["attempts"]] == ["retry", "unknown", "unknown", "accepted"]
    assert done["attempts"][3]["error"] is None
    same_attempt(done)
    assert done["stages"]["dispatch_started"] > first["attempts"][1]["ended_ts"]


def test_redrive_of_an_accepted_delivery_is_refused(world: World):
    world.hook("Fine")
    did = world.send("Fine")
    world.settled(did)
    with pytest.raises(CourierAPIError) as e:
        world.admin.request("POST", f"/v1/deliveries/{did}/redrive")
    assert e.value.status == 409 and e.value.code == "DELIVERY_NOT_REDRIVABLE"


def test_redrive_takes_the_project_token(world: World):
    world.hook("Other", lambda n: (400, b""))
    did = world.send("Other")
    world.settled(did)
    with pytest.raises(CourierAPIError) as e:
        world.alice.request("POST", f"/v1/deliveries/{did}/redrive")
    assert e.value.status == 403


def test_a_url_outside_the_allow_list_is_refused_at_registration(world: World):
    before = world.admin.list_agents(world.project_id)
    with pytest.raises(CourierAPIError) as e:
        world.admin.register_agent(world.project_id, "Far",
                                   {"kind": "webhook", "url": "http://203.0.113.7/hook"})
    assert e.value.status == 422 and e.value.code == "INVALID_ARGUMENT"
    assert e.value.details["field"] == "transport.url"
    assert world.admin.list_agents(world.project_id) == before


def test_a_given_secret_signs_and_is_never_listed(world: World):
    path = f"/{uuid.uuid4().hex}"
    world.admin.register_agent(world.project_id, "Keyed", {
        "kind": "webhook", "url": world.receiver.url(path), "secret": "s3cret-words-24-chars-ok"})
    did = world.send("Keyed")
    world.settled(did)
    [req] = world.receiver.requests(path)
    Webhook(b"s3cret-words-24-chars-ok").verify(req.body, req.headers)
    rows = world.admin.list_agents(world.project_id)
    assert "s3cret" not in json.dumps(rows)


@pytest.mark.slow
def test_an_endpoint_failing_for_a_sustained_time_is_unhealthy_and_its_deliveries_wait(
        tmp_path_factory: pytest.TempPathFactory, receiver: Receiver):
    stack = make_stack(tmp_path_factory.mktemp("health"), webhook_timeout_s="1",
                       webhook_retry_schedule_s="0.1,0.1,0.1,0.1,0.1,0.1",
                       webhook_unhealthy_failures="3", webhook_unhealthy_after_s="0.2",
                       webhook_probe_interval_s="3")
    w = World(stack, receiver)
    try:
        stack.start_worker(queues="deliver.webhook,courier.sweep", concurrency=1)
        path, row = w.hook("Sick", lambda n: (503, b""))
        first = w.send("Sick")
        listed = wait_until(
            lambda: [a for a in w.admin.list_agents(w.project_id)
                     if a["agent_id"] == row["agent_id"]
                     and a["transport"]["health"] == "unhealthy"],
            10, 0.1, "the endpoint marked unhealthy")
        assert listed[0]["transport"]["failures_in_a_row"] >= 3
        # while held, nothing is sent to it: no hammering
        hits = w.receiver.count(path)
        second = w.send("Sick")
        time.sleep(1.5)
        assert w.receiver.count(path) == hits
        assert w.admin.delivery(second)["attempts"] == []
        # the endpoint comes back: the next probe succeeds and the waiting mail goes out
        w.receiver.behaviours[path] = lambda n: (200, b"{}")
        d = wait_until(lambda: (x := w.admin.delivery(second))["outcome"] and x, 15, 0.2,
                       "the held delivery after the endpoint recovered")
        assert d["outcome"] == "accepted"
        healthy = [a for a in w.admin.list_agents(w.project_id)
                   if a["agent_id"] == row["agent_id"]][0]
        assert healthy["transport"]["health"] == "healthy"
        # the first waited too (its retries fell in the hold); it ends known, never unknown
        assert wait_until(lambda: w.admin.delivery(first)["outcome"], 15, 0.2,
                          "the first delivery's outcome") in ("accepted", "failed")
    finally:
        w.close()
        stack.stop()


# Verifying with the receivers' own libraries (docs/http-api.md, Verifying a
# delivery): the calls there, exactly, for both kinds of secret.

NPM_VERIFIERS = {"standardwebhooks": "^1.0.0", "svix": "^1.60.0"}
# A secret that is not whsec_: printable, and not ASCII only, so that a verifier
# reading it as anything but its UTF-8 bytes fails.
RAW_SECRET = "shared-secret-for-the-hook-é-0123456789"
VERIFY_JS = """
const [lib, secret] = process.argv.slice(2);
const { Webhook } = require(lib);
const { body, headers } = JSON.parse(require("fs").readFileSync(0, "utf8"));
const wh = secret.startsWith("whsec_")
  ? new Webhook(secret)
  : new Webhook(new TextEncoder().encode(secret), { format: "raw" });
wh.verify(body, headers);
console.log("verified");
"""


@pytest.fixture(scope="module")
def npm_verifiers() -> Path:
    """The npm verifiers, installed once, and the script that runs them."""
    root = npm.installed("webhook-verifiers", NPM_VERIFIERS)
    (root / "verify.js").write_text(VERIFY_JS)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("given", [None, RAW_SECRET], ids=["generated-whsec", "raw-utf8"])
def test_every_standard_webhooks_library_verifies_with_the_documented_call(
        world: World, npm_verifiers: Path, given: str | None):
    path, row = world.hook("Verified", secret=given)
    secret = given or row["transport"]["secret"]
    world.settled(world.send("Verified"))
    [req] = world.receiver.requests(path)
    # PyPI standardwebhooks
    key = secret if secret.startswith("whsec_") else secret.encode()
    assert Webhook(key).verify(req.body, req.headers)["body_md"] == "# Take it\n"
    if given is not None:  # the library's reading of a string: base64, not the bytes
        with pytest.raises(Exception):  # noqa: B017 - the library's error varies
            Webhook(secret).verify(req.body, req.headers)
    # npm standardwebhooks and svix
    delivered = json.dumps({"body": req.body.decode(), "headers": req.headers})
    for lib in NPM_VERIFIERS:
        done = subprocess.run(["node", "verify.js", lib, secret], input=delivered,
                              cwd=npm_verifiers, capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() == "verified", (lib, done.stderr)
