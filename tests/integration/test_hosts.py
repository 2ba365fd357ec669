"""Courier on several hosts, for real, on one machine (tests/netns.py): the store, the
broker, the API and the workers each on a host of its own, run with the commands
of docs/operations.md, and the network between them cut."""

from __future__ import annotations

import os
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from messaging.client import CourierClient
from messaging.launch.embedded import EmbeddedStore
from tests.netns import HostedStore, Hosts, can_make_hosts, courier, serving
from tests.skewclock import TOLERANCE_S, SkewedClocks, log_offset_s
from tests.stack import wait_until

_why_not = can_make_hosts()
# Hosts, stores and workers of their own, and leases run out for real: the slow tier.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_why_not is not None, reason=f"no hosts: {_why_not}")]

API_PORT = 8787
STORE_PORT = 6390
LEASE_S = 3


class Deployment:
    """Courier spread over hosts: the store (and broker) hosts, the API's, workers'."""

    def __init__(self, hosts: Hosts, root: Path, broker_host: bool = False) -> None:
        self.hosts, self.root = hosts, root
        for name in ("store", "api", "worker-a", "worker-b"):
            hosts.add(name)
        self.store = HostedStore(hosts, "store", root / "store", STORE_PORT)
        self.store.start()
        self.stores: list[EmbeddedStore] = [self.store]
        broker_url = self.store.url
        if broker_host:
            hosts.add("broker")
            broker = HostedStore(hosts, "broker", root / "broker", STORE_PORT)
            broker.start()
            self.stores.append(broker)
            broker_url = broker.url
        self.operator_token = "cop_" + secrets.token_urlsafe(16)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
        self.env.update({
            "COURIER_REDIS_URL": self.store.url, "COURIER_BROKER_URL": broker_url,
            "COURIER_OPERATOR_TOKEN": self.operator_token,
            "COURIER_INBOX_LEASE_S": str(LEASE_S), "COURIER_OUTBOX_GRACE_S": "2",
            "COURIER_SWEEP_INTERVAL_S": "0.5", "COURIER_RATE_LIMIT_PER_S": "0",
            "COURIER_API_PROCESSES": "1", "COURIER_WEBHOOK_ALLOW": hosts.net + ".0/24"})
        self.url = f"http://{hosts.address('api')}:{API_PORT}"

    def host_env(self, name: str, **extra: str) -> dict[str, str]:
        data = self.root / f"data-{name}"
        data.mkdir(exist_ok=True)
        return {**self.env, "COURIER_DATA_DIR": str(data), **extra}

    def start_api(self) -> None:
        self.hosts.run("api", "api", courier("run", "api"), self.host_env(
            "api", COURIER_HOST=self.hosts.address("api"), COURIER_PORT=str(API_PORT)))
        serving(self.url)

    def start_worker(self, host: str, beat: bool = False, **extra: str) -> None:
        self.hosts.run(host, "worker", courier("run", "worker-inbox"),
                       self.host_env(host, **extra))
        if beat:
            self.hosts.run(host, "beat", courier("run", "beat"), self.host_env(host, **extra))

    def team(self) -> tuple[CourierClient, Any, Any]:
        """A project's admin client, and its sender's and recipient's rows."""
        with CourierClient(self.url, self.operator_token) as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        admin = CourierClient(self.url, p["token"])
        alice = admin.register_agent(p["project_id"], "Alice")
        bob = admin.register_agent(p["project_id"], "Bob")
        return admin, alice, bob

    def stop(self) -> None:
        for store in self.stores:
            store.stop()


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    with Hosts(tmp_path) as h:
        yield h


def _send_many(url: str, token: str, count: int, per_s: float) -> list[str]:
    sent = []
    with httpx.Client(base_url=url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        for n in range(count):
            answer = client.post("/v1/messages", json={"to": ["Bob"], "subject": f"m{n}",
                                                       "body_md": "x"})
            assert answer.status_code == 201, answer.text
            sent.append(answer.json()["id"])
            time.sleep(1 / per_s)
    return sent


def _inbox_ids(url: str, token: str) -> list[str]:
    with CourierClient(url, token) as bob:
        return [m["id"] for m in bob.iter_inbox(limit=500)]


def test_a_worker_host_cut_off_mid_run_delivers_nothing_twice(hosts: Hosts, tmp_path: Path):
    d = Deployment(hosts, tmp_path)
    try:
        d.start_api()
        d.start_worker("worker-a")  # the only worker while the burst starts
        admin, alice, bob = d.team()
        wait_until(lambda: "ready" in hosts.log("worker-a", "worker"), timeout_s=60,
                   what="worker-a up")
        sent: list[str] = []
        senders = [threading.Thread(target=lambda: sent.extend(
            _send_many(d.url, alice["token"], 40, 200))) for _ in range(8)]
        for t in senders:
            t.start()
        time.sleep(0.5)
        hosts.cut("worker-a")  # mid-run: what it leased or reserved, it cannot record
        d.start_worker("worker-b", beat=True)
        time.sleep(LEASE_S * 2)
        hosts.mend("worker-a")
        for t in senders:
            t.join(60)
        assert len(sent) == 320
        wait_until(lambda: len(_inbox_ids(d.url, bob["token"])) >= len(sent), timeout_s=90,
                   what="every send in the inbox")
        time.sleep(LEASE_S)  # anything late from worker-a would show now
        seen = _inbox_ids(d.url, bob["token"])
        assert sorted(seen) == sorted(sent)  # each once
        attempts = [len(dl["attempts"]) for mid in sent for dl in admin.message_deliveries(mid)]
        print(f"worker host cut for {LEASE_S * 2} s: {len(sent)} delivered once each, "
              f"{sum(1 for a in attempts if a > 1)} taken again after their lease ran out")
        admin.close()
    finally:
        d.stop()


def test_an_api_host_cut_off_from_the_broker_still_admits_and_the_sweeper_publishes(
        hosts: Hosts, tmp_path: Path):
    d = Deployment(hosts, tmp_path, broker_host=True)
    try:
        d.start_api()
        d.start_worker("worker-b", beat=True)
        admin, alice, bob = d.team()
        hosts.block("api", "broker")  # the store is still reachable, the broker is not
        sent = _send_many(d.url, alice["token"], 20, 20)
        wait_until(lambda: sorted(_inbox_ids(d.url, bob["token"])) == sorted(sent),
                   timeout_s=60, what="the sweeper publishing what the API could not")
        hosts.unblock("api", "broker")
        admin.close()
    finally:
        d.stop()


SKEW_S = 30


def test_worker_hosts_with_their_clocks_30_s_off_decide_no_lease_by_them(
        hosts: Hosts, tmp_path: Path):
    # Leases run LEASE_S (3 s): by either worker's clock, the other's leases would end
    # 30 s early or late. Every delivery must be taken once, by the store's clock.
    clocks = SkewedClocks(tmp_path)
    d = Deployment(hosts, tmp_path)
    try:
        d.start_api()
        for host, shift in (("worker-a", -SKEW_S), ("worker-b", SKEW_S)):
            clocks.check(d.env, shift)
            d.start_worker(host, beat=host == "worker-b", **clocks.env(shift))
        for host, shift in (("worker-a", -SKEW_S), ("worker-b", SKEW_S)):
            wait_until(lambda h=host: "ready" in hosts.log(h, "worker"), timeout_s=60,
                       what=f"{host} up")
            offset = log_offset_s(hosts.log(host, "worker"))
            assert abs(offset - shift) <= TOLERANCE_S, (host, offset)
        admin, alice, bob = d.team()
        sent: list[str] = []
        senders = [threading.Thread(target=lambda: sent.extend(
            _send_many(d.url, alice["token"], 30, 20))) for _ in range(4)]
        for t in senders:
            t.start()
        for t in senders:
            t.join(120)
        assert len(sent) == 120
        wait_until(lambda: len(_inbox_ids(d.url, bob["token"])) >= len(sent), timeout_s=90,
                   what="every send in the inbox")
        time.sleep(2 * LEASE_S)  # a lease misjudged by a host's clock would be retaken now
        assert sorted(_inbox_ids(d.url, bob["token"])) == sorted(sent)  # each once
        deliveries = [dl for mid in sent for dl in admin.message_deliveries(mid)]
        attempts = sorted({len(dl["attempts"]) for dl in deliveries})
        print(f"workers {-SKEW_S:+d} s and {SKEW_S:+d} s: {len(sent)} delivered once each, "
              f"attempts per delivery {attempts}")
        assert attempts == [1]
        admin.close()
    finally:
        d.stop()
