"""The embedded store's memory limit: set from COURIER_STORE_MAX_MEMORY, and STORE_FULL at it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from messaging.client import CourierAPIError
from messaging.config import physical_memory_bytes
from messaging.launch.embedded import wait_ready
from tests.stack import ROOT, Stack, free_port, make_stack, wait_until

LIMIT = "8mb"
LIMIT_BYTES = 8 * 2**20
BODY = "x" * 200_000


def run_store_module(data_dir: Path, **env: str) -> tuple[int, bytes]:
    """Run ``python -m messaging.launch.embedded`` until it serves; its maxmemory and output."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    environ.update(COURIER_DATA_DIR=str(data_dir), COURIER_EMBEDDED_PORT=str(port), **env)
    with subprocess.Popen([sys.executable, "-m", "messaging.launch.embedded"], cwd=ROOT,
                          env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        try:
            password = data_dir / "store-password"
            wait_until(lambda: password.exists() and password.read_text().strip(), 15,
                       what="the store's password")
            url = f"redis://:{password.read_text().strip()}@127.0.0.1:{port}/0"
            wait_ready(url, timeout_s=15)
            with redis.Redis.from_url(url) as client:
                limit = int(client.config_get("maxmemory")["maxmemory"])
                policy = client.config_get("maxmemory-policy")["maxmemory-policy"]
        finally:
            proc.send_signal(signal.SIGTERM)
            output, _ = proc.communicate(timeout=10)
    assert policy == "noeviction"
    return limit, output


def test_the_store_runs_with_the_configured_limit(tmp_path: Path):
    limit, output = run_store_module(tmp_path, COURIER_STORE_MAX_MEMORY="512mb")
    assert limit == 512 * 2**20
    assert b"memory limit 512 MiB" in output


def test_the_store_limit_defaults_to_a_quarter_of_the_machine(tmp_path: Path):
    limit, _ = run_store_module(tmp_path)
    assert limit == physical_memory_bytes() // 4


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose store holds at most LIMIT."""
    s = make_stack(tmp_path_factory.mktemp("small"), store_max_memory=LIMIT)
    try:
        yield s
    finally:
        s.stop()


def test_sends_fill_the_store_until_writes_answer_store_full_and_readyz_says_so(small: Stack):
    ready = httpx.get(small.api_url + "/readyz", timeout=5).json()
    assert ready["ready"] is True and ready["store_max_memory_bytes"] == LIMIT_BYTES
    with small.operator() as op:
        p = op.create_project(f"/srv/{uuid.uuid4().hex}")
    with small.client(p["token"]) as admin:
        alice = admin.register_agent(p["project_id"], "Alice")
        admin.register_agent(p["project_id"], "Bob")
    sent: list[str] = []
    with small.client(alice["token"]) as a:
        for _ in range(2 * LIMIT_BYTES // len(BODY)):
            try:
                sent.append(a.send(["Bob"], f"Fill {len(sent)}", BODY)["id"])
            except CourierAPIError as err:
                refused = err
                break
        else:
            pytest.fail(f"{sent} sends of {len(BODY)} bytes fit in a store of {LIMIT}")
        assert (refused.status, refused.code, refused.persisted) == (503, "STORE_FULL", False)
        assert len(sent) > 5
        answer = httpx.get(small.api_url + "/readyz", timeout=5)
        assert answer.status_code == 503
        ready = answer.json()
        assert ready["store_full"] is True and ready["ready"] is False
        # Full: the largest body (1 MiB by default) may no longer fit.
        assert ready["store_used_memory_bytes"] >= LIMIT_BYTES - 64 * 1024 - 2**20
        assert ready["store_max_memory_bytes"] == LIMIT_BYTES
        text = httpx.get(small.api_url + "/metrics", timeout=5).text
        gauges = {s.name: s.value for f in text_string_to_metric_families(text)
                  for s in f.samples}
        assert gauges["courier_store_max_memory_bytes"] == LIMIT_BYTES
        # Near the limit (client buffers come and go between the two reads).
        assert gauges["courier_store_used_memory_bytes"] >= LIMIT_BYTES * 0.9
        # What was admitted before is still there to read.
        assert a.get_message(sent[0])["subject"] == "Fill 0"
