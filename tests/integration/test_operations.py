"""Operations: health, readiness, metrics, rate limiting, Flower's queues."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from messaging.client import CourierAPIError
from messaging.config import Settings
from messaging.web.bodylimit import request_cap
from tests.integration.conftest import Project
from tests.stack import Stack, free_port, make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name) + (re.escape("{" + labels + "}") if labels else "") + r" (\S+)"
    found = re.search(r"^" + pattern + "$", text, re.M)
    assert found, f"{name}{{{labels}}} not in /metrics"
    return float(found.group(1))


def test_healthz_and_readyz_answer_when_store_and_broker_are_up(stack: Stack):
    assert httpx.get(stack.api_url + "/healthz").status_code == 200
    ready = httpx.get(stack.api_url + "/readyz")
    assert ready.status_code == 200
    assert {k: ready.json()[k] for k in ("ready", "store", "broker", "store_full")} == {
        "ready": True, "store": True, "broker": True, "store_full": False}


def test_readyz_is_503_when_the_broker_is_unreachable(stack: Stack):
    proc, url = stack.start_api(env={"COURIER_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"})
    try:
        ready = httpx.get(url + "/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["broker"] is False
        assert ready.json()["store"] is True
    finally:
        proc.stop()


def test_metrics_count_admissions_outcomes_latency_and_queue_depth(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    before = httpx.get(project.stack.api_url + "/metrics").text
    sent = alice.api.send(["Bob"], "m", "x")
    with pytest.raises(CourierAPIError):
        alice.api.send(["Nobody"], "m", "x")
    wait_until(lambda: bob.api.inbox()["messages"], what="delivery")
    wait_until(lambda: alice.api.delivery(sent["delivery"]["observations"][0]["delivery_id"])[
        "stage"] == "delivery_observed", what="observation")
    after = httpx.get(project.stack.api_url + "/metrics").text
    for name, labels in [("courier_admissions_total", 'outcome="admitted"'),
                         ("courier_admissions_total", 'outcome="RECIPIENT_NOT_FOUND"'),
                         ("courier_deliveries_total", 'outcome="accepted"'),
                         ("courier_deliveries_observed_total", ""),
                         ("courier_dispatch_latency_seconds_count", "")]:
        old = _metric(before, name, labels) if name + "{" + labels in before or (
            not labels and re.search("^" + name + " ", before, re.M)) else 0.0
        assert _metric(after, name, labels) >= old + 1, (name, labels)
    for queue in ("deliver.inbox", "deliver.webhook", "courier.sweep"):
        assert _metric(after, "courier_queue_depth", f'queue="{queue}"') >= 0


def _count(text: str, name: str, labels: str) -> float:
    """A counter's value, 0 before its first increment."""
    return _metric(text, name, labels) if f"{name}{{{labels}}} " in text else 0.0


def test_every_refusal_is_counted_by_code_and_face(project: Project):
    from tests.integration.test_mcp import mcp

    alice, bob = project.agent("Alice"), project.agent("Bob")
    metrics = project.stack.api_url + "/metrics"
    faces = [("INVALID_ARGUMENT", "http"), ("INVALID_ARGUMENT", "mcp"), ("NOT_FOUND", "http"),
             ("UNAUTHENTICATED", "mcp"), ("RECIPIENT_NOT_FOUND", "mcp"),
             ("BODY_TOO_LARGE", "http")]
    labels = [f'code="{code}",face="{face}"' for code, face in faces]
    before = httpx.get(metrics).text

    refused = alice.api.http.post("/v1/messages", json={"to": ["Bob"], "subject": "s",
                                                        "ack_required": "yes"})
    assert refused.status_code == 422
    assert alice.api.http.get("/v1/messages/msg_nothing").status_code == 404
    assert httpx.post(project.stack.api_url + "/mcp", json={}).status_code == 401
    over = request_cap(Settings.model_fields["max_body_bytes"].default) + 1  # past the cap
    too_large = alice.api.http.post("/v1/messages", content=b"x" * over,
                                    headers={"Content-Type": "application/json"})
    assert too_large.status_code == 413

    async def over_mcp() -> None:
        async with mcp(project, alice) as tools:
            for args in ({"to": ["Bob"], "subject": "s", "ack_required": 1},
                         {"to": ["Nobody"], "subject": "s"}):
                error, _ = await tools.raw("send_message", **args)
                assert error is True

    asyncio.run(over_mcp())
    after = httpx.get(metrics).text
    for label in labels:
        assert _count(after, "courier_refusals_total", label) == _count(
            before, "courier_refusals_total", label) + 1, label
    assert bob.api.inbox()["messages"] == []


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Stack]:
    s = make_stack(tmp_path, rate_limit_per_s="5")
    yield s
    s.stop()


def test_a_token_over_its_rate_gets_429_with_retry_after(limited: Stack):
    with limited.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    headers = {"Authorization": f"Bearer {p['token']}"}
    url = f"{limited.api_url}/v1/projects/{p['project_id']}/agents"
    with httpx.Client() as http:
        codes = [http.get(url, headers=headers) for _ in range(20)]
        limited_answers = [r for r in codes if r.status_code == 429]
        assert limited_answers, [r.status_code for r in codes]
        body = limited_answers[0].json()
        assert body["error"]["code"] == "RATE_LIMITED"
        assert int(limited_answers[0].headers["retry-after"]) >= 1
        # another token is not held back by this one
        other = {"Authorization": f"Bearer {limited.operator_token}"}
        assert http.get(url, headers=other).status_code == 200
        time.sleep(1.1)
        assert http.get(url, headers=headers).status_code == 200
        # An agent's sends spend from its token's bucket inside their admission
        # (the bucket in the project's slot, on a cluster too).
        agent = http.post(url, headers=headers,
                          json={"name": "Alice", "transport": {"kind": "inbox"}}).json()
        send = {"to": ["Alice"], "subject": "s", "body_md": "x"}
        sends = [http.post(f"{limited.api_url}/v1/messages", json=send,
                           headers={"Authorization": f"Bearer {agent['token']}"})
                 for _ in range(20)]
        codes = [r.status_code for r in sends]
        assert codes[0] == 201 and 429 in codes and set(codes) == {201, 429}, codes
        refused = next(r for r in sends if r.status_code == 429)
        assert refused.json()["error"]["code"] == "RATE_LIMITED"
        assert int(refused.headers["retry-after"]) >= 1
