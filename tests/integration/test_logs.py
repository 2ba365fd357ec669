"""Logs an operator can keep: no line per task unless asked, warnings always."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.receiver import Receiver
from tests.stack import ROOT, free_port, make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

# How long the outage test keeps the store frozen, then stopped.
FROZEN_S = 8


def test_a_worker_writes_no_line_per_task_by_default(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, log_tasks="0")
    try:
        worker = stack.start_worker()
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        with stack.client(p["token"]) as admin:
            row = admin.register_agent(p["project_id"], "Alice")
            admin.register_agent(p["project_id"], "Bob")
            with stack.client(row["token"]) as alice:
                sent = alice.send(["Bob"], "Quiet", "# shh\n")
                did = sent["delivery"]["observations"][0]["delivery_id"]
                wait_until(lambda: admin.delivery(did)["outcome"] == "accepted",
                           what="delivery")
        text = worker.log.read_text(errors="replace")
        assert "ready." in text  # the worker does log what matters
        assert "] received" not in text and "succeeded in" not in text
        assert "Sending due task" not in text  # beat ran inside the worker, quietly
    finally:
        stack.stop()


def test_task_logging_names_a_webhook_without_its_query_string(tmp_path: Path) -> None:
    receiver = Receiver()
    receiver.start()
    stack = make_stack(tmp_path, log_tasks="1")
    try:
        worker = stack.start_worker(queues="deliver.inbox,deliver.webhook,courier.sweep")
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        with stack.client(p["token"]) as admin:
            row = admin.register_agent(p["project_id"], "Alice")
            admin.register_agent(p["project_id"], "Hook", {
                "kind": "webhook", "url": receiver.url("/hook?token=s3cr3t-in-query")})
            with stack.client(row["token"]) as alice:
                sent = alice.send(["Hook"], "Logged", "# hi\n")
                did = sent["delivery"]["observations"][0]["delivery_id"]
                wait_until(lambda: admin.delivery(did)["outcome"] == "accepted",
                           what="delivery")
        assert receiver.count("/hook?token=s3cr3t-in-query") == 1
        text = worker.log.read_text(errors="replace")
        assert f'HTTP Request: POST {receiver.url("/hook")} "HTTP/1.0 200 OK"' in text
        assert "s3cr3t-in-query" not in text
    finally:
        stack.stop()
        receiver.stop()


def _objects(text: str) -> list[dict[str, Any]]:
    """Every line of a log as a JSON object (fails on a line that is not one)."""
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                item = json.loads(line)
            except ValueError:
                raise AssertionError(f"not a JSON line: {line!r}") from None
            assert isinstance(item, dict), line
            assert {"ts", "level", "process", "event"} <= item.keys(), line
            out.append(item)
    return out


def test_every_process_writes_one_json_object_per_line(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, log_format="json")
    try:
        worker = stack.start_worker(beat=False)
        beat = stack.spawn("beat", ["-m", "celery", "-A", "workers.app", "beat", "-s",
                                    str(tmp_path / "schedule"), "--loglevel", "INFO"])
        api, api_url = stack.serve("api", ["-m", "messaging.web.serve", "messaging.web.app:app",
                                           "--host", "127.0.0.1", "--port", "{port}"], "/healthz")
        flower, flower_url = stack.start_flower(["-m", "messaging.launch.flower"])
        assert httpx.get(f"{api_url}/v1/nothing-here", timeout=5).status_code == 404
        wait_until(lambda: "Sending due task" in beat.log.read_text(), what="beat's tick")
        store_env = {"COURIER_DATA_DIR": str(tmp_path / "own"), "COURIER_REDIS_URL": "",
                     "COURIER_EMBEDDED_PORT": str(free_port())}
        store = stack.spawn("store", ["-m", "messaging.launch.embedded"], store_env)
        wait_until(lambda: "log in" in store.log.read_text(), what="the store wrapper")
        for proc in (api, worker, beat, flower, store):
            proc.stop()

        served = _objects(api.log.read_text())
        assert {o["process"] for o in served} == {"api"}
        assert any(o["event"].startswith("Started server process") for o in served)
        (access,) = [o for o in served if o.get("path") == "/v1/nothing-here"]
        assert (access["method"], access["status"], access["level"]) == ("GET", 404, "INFO")
        worked = _objects(worker.log.read_text())
        assert any(o["event"].endswith("ready.") for o in worked), worked
        assert {o["process"] for o in worked} == {"worker-" + worker_node(worker)}
        ticked = _objects(beat.log.read_text())
        assert {o["process"] for o in ticked} == {"beat"}
        assert any("Sending due task" in o["event"] for o in ticked)
        assert {o["process"] for o in _objects(flower.log.read_text())} == {"flower"}
        stored = _objects(store.log.read_text())
        assert {o["process"] for o in stored} == {"store"}
        assert any("log in" in o["event"] for o in stored)
    finally:
        stack.stop()


def worker_node(worker: Any) -> str:
    """The kind part of a test worker's node name (``w1a2b3c@test``: ``w1a2b3c``)."""
    args = worker.popen.args
    return str(args[args.index("-n") + 1]).partition("@")[0]


def _outage_lines(logs: dict[str, Path], marks: dict[str, int]) -> dict[str, list[str]]:
    """What each log says about the connection since its mark."""
    found: dict[str, list[str]] = {}
    for name, path in logs.items():
        text = path.read_bytes()[marks[name]:].decode(errors="replace")
        assert "Traceback" not in text, f"{name}:\n{text[-3000:]}"
        found[name] = [o.get("courier_outage", "") for o in _objects(text)]
    return found


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_outage_is_one_line_when_lost_and_one_when_back(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, log_format="json", log_tasks="0")
    try:
        worker = stack.start_worker(beat=False)
        beat = stack.spawn("beat", ["-m", "celery", "-A", "workers.app", "beat", "-s",
                                    str(tmp_path / "schedule"), "--loglevel", "INFO"])
        logs = {"worker": worker.log, "beat": beat.log}
        wait_until(lambda: list(tmp_path.glob("schedule*")), what="beat's schedule")
        time.sleep(2)

        # Frozen: every command times out, as on a store that stalls.
        marks = {name: path.stat().st_size for name, path in logs.items()}
        os.kill(stack.store.pid, signal.SIGSTOP)
        time.sleep(FROZEN_S)
        os.kill(stack.store.pid, signal.SIGCONT)
        wait_until(lambda: "back" in _outage_lines(logs, marks)["beat"], 30,
                   what="beat's line that the connection is back")
        time.sleep(3)
        said = _outage_lines(logs, marks)
        assert said["beat"] == ["lost", "back"], said
        # The worker, waiting on its queue, may not have noticed: one pair at most.
        assert said["worker"] in ([], ["lost", "back"]), said

        # Gone: connections refused, then the store comes back on its port.
        marks = {name: path.stat().st_size for name, path in logs.items()}
        stack.store.stop()
        time.sleep(FROZEN_S)
        stack.store.start()
        wait_until(lambda: all("back" in lines for lines in _outage_lines(logs, marks)
                               .values()), 40, what="both lines that the connection is back")
        time.sleep(3)
        said = _outage_lines(logs, marks)
        assert said == {"worker": ["lost", "back"], "beat": ["lost", "back"]}, said
    finally:
        stack.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_courier_up_with_json_logs_writes_only_json_lines(tmp_path: Path) -> None:
    api = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update({"COURIER_DATA_DIR": str(tmp_path / "data"), "COURIER_PORT": str(api),
                "COURIER_EMBEDDED_PORT": str(free_port()),
                "COURIER_FLOWER_PORT": str(free_port()), "COURIER_LOG_FORMAT": "json"})
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "messaging.cli", "up"], cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        def ready() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.get(f"http://127.0.0.1:{api}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 90, 0.2, "courier up")
        wait_until(lambda: "ready." in log.read_text(), 60, 0.2, "the workers")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    said = _objects(log.read_text())
    processes = {o["process"] for o in said}
    assert {"courier", "store", "api", "worker-inbox", "worker-webhook", "beat",
            "flower"} <= processes, processes
    assert any(o["process"] == "courier" and o["event"].startswith("API:") for o in said)
