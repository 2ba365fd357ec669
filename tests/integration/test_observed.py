"""An observation is recorded also after an ``unknown`` outcome (docs/http-api.md: Deliveries).

A webhook that hangs past the timeout leaves its delivery ``unknown``; the
recipient's host then says it showed the message: ``delivery_observed`` is
recorded, and the outcome stays ``unknown``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.receiver import Receiver
from tests.stack import Stack, make_stack, wait_until

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def hooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("observed"), webhook_timeout_s=str(TIMEOUT_S),
                   webhook_retry_schedule_s="0.2")
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


@pytest.mark.slow
def test_observed_after_unknown_is_recorded_and_the_outcome_stays_unknown(
        hooks: Stack, receiver: Receiver):
    with hooks.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    with hooks.client(p["token"]) as admin:
        alice = hooks.client(admin.register_agent(p["project_id"], "Alice")["token"])
        path = f"/{uuid.uuid4().hex}"
        receiver.behaviours[path] = lambda n: "hang"
        slow = admin.register_agent(p["project_id"], "Slow",
                                    {"kind": "webhook", "url": receiver.url(path)})
        sent = alice.send(["Slow"], "Handoff", "x")
        did = sent["delivery"]["observations"][0]["delivery_id"]
        d = wait_until(lambda: (x := admin.delivery(did))["outcome"] and x, 15, 0.05,
                       "an outcome")
        assert d["outcome"] == "unknown" and d["stage"] == "provider_result_recorded"
        with hooks.client(slow["token"]) as host:
            shown = host.http.post(f"/v1/deliveries/{did}/observed")
        assert shown.status_code == 200, shown.text
        after = admin.delivery(did)
        alice.close()
    assert after["stage"] == "delivery_observed" and after["observed_ts"]
    assert after["outcome"] == "unknown"
    assert "delivery_observed" in after["stages"]
