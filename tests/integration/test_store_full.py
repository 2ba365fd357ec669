"""A full store (maxmemory reached, noeviction) is an answer: 503 STORE_FULL, nothing written."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from messaging.client import CourierAPIError
from tests.stack import Stack, make_stack, project_state


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack without workers whose store's maxmemory the tests lower and restore; its
    rate limit on, as by default (every request writes its rate bucket)."""
    s = make_stack(tmp_path_factory.mktemp("full"), rate_limit_per_s="1000")
    try:
        yield s
    finally:
        s.stop()


class Full:
    """Lowers the store's maxmemory below what it uses, until the block ends."""

    def __init__(self, stack: Stack) -> None:
        self.r = stack.redis()

    def __enter__(self) -> Full:
        used = int(self.r.info("memory")["used_memory"])
        self.r.config_set("maxmemory", str(used // 2))
        return self

    def __exit__(self, *exc: object) -> None:
        self.r.config_set("maxmemory", "0")
        self.r.close()


def refused(call: Any) -> CourierAPIError:
    with pytest.raises(CourierAPIError) as err:
        call()
    assert (err.value.status, err.value.code, err.value.persisted) == (503, "STORE_FULL", False)
    return err.value


def all_keys(stack: Stack) -> dict[str, Any]:
    with stack.redis() as r:
        return {k: r.type(k) for k in r.scan_iter(count=1000)}


def test_writes_answer_store_full_and_write_nothing(small: Stack) -> None:
    with small.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    with small.client(p["token"]) as admin:
        alice = admin.register_agent(p["project_id"], "Alice")
        bob = admin.register_agent(p["project_id"], "Bob")
        with small.client(alice["token"]) as a, small.client(bob["token"]) as b:
            first = a.send(["Bob"], "Before", "# fits\n")
            kept = a.send(["Bob"], "Kept", "# fits\n", idempotency_key="k-0")
            before = project_state(small, p["project_id"])
            keys_before = all_keys(small)
            with Full(small):
                refused(lambda: a.send(["Bob"], "Full", "# no room\n",
                                       idempotency_key="k-1"))
                refused(lambda: a.send(["Bob", "Alice"], "Full", "# no room\n",
                                       thread_id=first["thread_id"]))
                refused(lambda: b.reply(first["id"], "# no room\n"))
                refused(lambda: b.acknowledge(first["id"]))
                refused(lambda: admin.register_agent(p["project_id"], "Carol"))
                with small.operator() as op:
                    refused(lambda: op.create_project(f"/srv/{uuid.uuid4().hex}"))
                # Reads still work, and so do the answers a send gets before any write:
                # a replay, a refused recipient (its rate spent all the same).
                replayed = a.send(["Bob"], "Kept", "# fits\n", idempotency_key="k-0")
                assert replayed["idempotent_replay"] is True and replayed["id"] == kept["id"]
                with pytest.raises(CourierAPIError) as unknown:
                    a.send(["Nobody"], "Full", "# no room\n")
                assert unknown.value.status != 503, unknown.value.code
                assert a.get_message(first["id"])["subject"] == "Before"
                assert project_state(small, p["project_id"]) == before
                assert all_keys(small) == keys_before
            # Room again: the same requests succeed, the idempotency key was never taken.
            again = a.send(["Bob"], "Full", "# no room\n", idempotency_key="k-1")
            assert again["idempotent_replay"] is False


def test_readyz_and_metrics_report_the_store_memory(small: Stack) -> None:
    ready = httpx.get(small.api_url + "/readyz", timeout=10)
    assert ready.json()["store_full"] is False
    with Full(small):
        ready = httpx.get(small.api_url + "/readyz", timeout=10)
        assert ready.status_code == 503
        body = ready.json()
        assert body["store_full"] is True and body["ready"] is False
        assert 0 < body["store_max_memory_bytes"] < body["store_used_memory_bytes"]
        text = httpx.get(small.api_url + "/metrics", timeout=10).text
    gauges = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("courier_store_")}
    assert gauges["courier_store_max_memory_bytes"] == body["store_max_memory_bytes"]
    assert gauges["courier_store_used_memory_bytes"] > gauges["courier_store_max_memory_bytes"]
