"""Recording a step's outcomes in one call: each delivery's record and the
project's counters come out as if each had been recorded alone.

A stack with no worker: the test leases and records as a worker's step does,
several deliveries of one recipient in one ``record_outcomes`` call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis

from messaging.store import keys
from messaging.store.deliveries import DeliveryStore, EndpointHealth, Leased, Result
from tests.integration.conftest import Project, open_project
from tests.stack import Stack

# Never unhealthy within the test: failures are counted, nothing is held.
HEALTH = EndpointHealth(failures=1_000, after_ms=3_600_000, probe_ms=1_000)
LEASE_MS = 60_000


@pytest.fixture
def project(quiet: Stack) -> Iterator[Project]:
    with open_project(quiet) as made:
        yield made


def leased_step(project: Project, store: DeliveryStore, n: int) -> list[Leased]:
    """``n`` sends from Alice to Bob, taken and leased as one step."""
    project.agent("Bob")
    alice = project.agent("Alice")
    for i in range(n):
        alice.api.send(["Bob"], f"m{i}", "x")
    taken = store.take_ready(project.project_id, "inbox", "", n)
    assert len(taken.delivery_ids) == n
    leased = store.lease(project.project_id, taken.delivery_ids, LEASE_MS, idempotent=True)
    assert [lease.delivery_id for lease in leased] == taken.delivery_ids
    return leased


def stats(store: DeliveryStore, project_id: str) -> dict[str, int]:
    return {k: int(v) for k, v in store.client.hgetall(keys.stats(project_id)).items()}


def delivery(store: DeliveryStore, project_id: str, delivery_id: str) -> dict[str, str]:
    return dict(store.client.hgetall(keys.delivery(project_id, delivery_id)))


def test_a_step_recorded_in_one_call_counts_each_outcome_once(
        project: Project, store: DeliveryStore):
    shown, accepted, rejected, retried = leased_step(project, store, 4)
    before = stats(store, project.project_id)
    start_us = time.time_ns() // 1000

    recorded = store.record_outcomes(project.project_id, [
        (shown, Result("accepted", displayed=True, endpoint="ok")),
        (accepted, Result("accepted", endpoint="ok")),
        (rejected, Result("rejected", error="no", endpoint="ok")),
        (retried, Result("retry", retry_in_ms=60_000, error="later", endpoint="down")),
    ], HEALTH)

    end_us = time.time_ns() // 1000
    assert recorded == [True, True, True, True]
    after = stats(store, project.project_id)
    added = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    latencies = added.pop("dispatch_ms_sum", 0)
    buckets = {k: v for k, v in added.items() if k.startswith("dispatch_ms_le:")}
    assert {k: v for k, v in added.items() if k not in buckets} == {
        "outcome:accepted": 2, "outcome:rejected": 1, "retry": 1, "observed": 1}
    assert sum(buckets.values()) == 3  # a retry is not an outcome yet
    ended = [shown, accepted, rejected]
    assert sum((start_us - d.admitted_us) // 1000 for d in ended) <= latencies
    assert latencies <= sum((end_us - d.admitted_us) // 1000 for d in ended)


def test_each_record_of_the_step_moves_its_own_stages(project: Project, store: DeliveryStore):
    shown, rejected, retried = leased_step(project, store, 3)
    before_ms = store.clock_ms(project.project_id)

    store.record_outcomes(project.project_id, [
        (shown, Result("accepted", displayed=True, endpoint="ok")),
        (rejected, Result("rejected", error="no", endpoint="ok")),
        (retried, Result("retry", retry_in_ms=0, error="later", endpoint="down")),  # due at once
    ], HEALTH)

    after_ms = store.clock_ms(project.project_id)

    d = delivery(store, project.project_id, shown.delivery_id)
    assert (d["stage"], d["outcome"], d["lease_until_ms"]) == ("delivery_observed", "accepted", "0")
    assert int(d["dispatch_started_us"]) <= int(d["provider_result_recorded_us"])
    assert d["delivery_observed_us"] == d["provider_result_recorded_us"]
    d = delivery(store, project.project_id, rejected.delivery_id)
    assert (d["stage"], d["outcome"]) == ("provider_result_recorded", "rejected")
    assert "delivery_observed_us" not in d
    assert json.loads(d["attempts"])[-1]["error"] == "no"
    d = delivery(store, project.project_id, retried.delivery_id)
    assert (d["stage"], d["lease_until_ms"]) == ("dispatch_started", "0")
    assert before_ms <= int(d["retry_at_ms"]) <= after_ms  # the store's clock, as it recorded
    assert "outcome" not in d and "provider_result_recorded_us" not in d

    # Leased again once due, after the sweeper counted it and an operator redrove it:
    # the new attempt starts clean of both marks, in the one write of the lease.
    store.client.hset(keys.delivery(project.project_id, retried.delivery_id),
                      mapping={"sweeps": 2, "redrive": 1})
    [again] = store.lease(project.project_id, [retried.delivery_id], LEASE_MS, idempotent=True)
    d = delivery(store, project.project_id, retried.delivery_id)
    assert (again.attempt, int(d["fence"]), d["stage"]) == (2, retried.fence + 1,
                                                            "dispatch_started")
    assert "sweeps" not in d and "redrive" not in d
    assert d["lease_until_ms"] != "0" and d["retry_at_ms"] == "0"


def test_endpoint_health_counts_every_failure_of_one_recipient_in_one_call(
        project: Project, store: DeliveryStore):
    leased = leased_step(project, store, 3)
    store.record_outcomes(project.project_id, [
        (lease, Result("retry", retry_in_ms=60_000, endpoint="down")) for lease in leased],
        HEALTH)

    bob = json.loads(store.client.hget(keys.agents(project.project_id), leased[0].agent_id))
    assert bob["endpoint"]["failures"] == 3
    assert "hold_until_ms" not in bob["endpoint"]


def test_a_damaged_delivery_fails_the_call_and_what_was_recorded_before_it_stays_counted(
        project: Project, store: DeliveryStore):
    good, damaged = leased_step(project, store, 2)
    store.client.hset(keys.delivery(project.project_id, damaged.delivery_id), "attempts", "[]")
    before = stats(store, project.project_id)

    with pytest.raises(redis.ResponseError):
        store.record_outcomes(project.project_id, [
            (good, Result("accepted", endpoint="ok")),
            (damaged, Result("accepted", endpoint="ok"))], HEALTH)

    assert delivery(store, project.project_id, good.delivery_id)["outcome"] == "accepted"
    assert "outcome" not in delivery(store, project.project_id, damaged.delivery_id)
    after = stats(store, project.project_id)
    assert after["outcome:accepted"] - before.get("outcome:accepted", 0) == 1
