"""RabbitMQ as the broker: admission publishes to it, workers consume from it.

Runs where a RabbitMQ server answers: COURIER_TEST_AMQP_URL (.ci/run sets it
when one listens on loopback). Each run gets a vhost of its own when
``rabbitmqctl`` can make one, so runs side by side never share queues.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.stack import Stack, make_stack, wait_until

AMQP_URL = os.environ.get("COURIER_TEST_AMQP_URL", "")

pytestmark = pytest.mark.skipif(
    not AMQP_URL, reason="no RabbitMQ here: set COURIER_TEST_AMQP_URL to run the AMQP broker "
    "tests (.ci/run sets it when RabbitMQ listens on 127.0.0.1:5672)")


def _ctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def amqp_url() -> Iterator[str]:
    """The broker URL, on a fresh vhost when this machine can make one."""
    if not shutil.which("rabbitmqctl"):
        yield AMQP_URL
        return
    parts = urlsplit(AMQP_URL)
    vhost = f"courier-test-{uuid.uuid4().hex[:8]}"
    _ctl("add_vhost", vhost)
    try:
        _ctl("set_permissions", "-p", vhost, parts.username or "guest", ".*", ".*", ".*")
        yield urlunsplit(parts._replace(path="/" + vhost))
    finally:
        _ctl("delete_vhost", vhost)


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory: pytest.TempPathFactory, amqp_url: str) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("amqp"), broker_url=amqp_url)
    try:
        s.start_worker()
        yield s
    finally:
        s.stop()


def test_messages_travel_through_a_rabbitmq_broker(rabbit: Stack):
    with rabbit.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    with rabbit.client(p["token"]) as admin:
        alice = admin.register_agent(p["project_id"], "Alice")
        bob = admin.register_agent(p["project_id"], "Bob")
        with rabbit.client(alice["token"]) as a, rabbit.client(bob["token"]) as b:
            sent = [a.send(["Bob"], f"via amqp {i}", "body") for i in range(20)]
            got = wait_until(lambda: len(x := list(b.iter_inbox())) == 20 and x, 30,
                             what="20 messages through RabbitMQ")
            assert sorted(m["id"] for m in got) == sorted(m["id"] for m in sent)
            did = sent[0]["delivery"]["observations"][0]["delivery_id"]
            assert admin.delivery(did)["outcome"] == "accepted"


def test_readyz_and_metrics_read_the_rabbitmq_broker(rabbit: Stack):
    assert httpx.get(rabbit.api_url + "/readyz", timeout=10).json()["broker"] is True
    text = httpx.get(rabbit.api_url + "/metrics", timeout=10).text
    assert 'courier_queue_depth{queue="deliver.inbox"}' in text
