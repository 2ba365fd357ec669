"""The ``courier`` command against real processes: up, send, inbox, delivery."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from messaging.client import CourierClient
from tests.integration.conftest import Project
from tests.stack import ROOT, free_port, wait_until

COURIER = [sys.executable, "-m", "messaging.cli"]


def courier(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    """Run one ``courier`` command; its stdout (fails the test on a non-zero exit)."""
    done = subprocess.run([*COURIER, *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def test_send_inbox_and_delivery_commands_show_the_message_and_its_stages(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    env = {**os.environ, "COURIER_URL": project.stack.api_url, "COLUMNS": "200"}
    sent = courier("send", "--to", "Bob", "--subject", "Review auth", "--token",
                   alice.row["token"], env=env, stdin="# Review\n\nPlease look at `auth.py`.\n")
    delivery_id = re.search(r"dlv_[0-9a-f]+", sent)
    assert delivery_id, sent

    def listed() -> str | None:
        shown = courier("inbox", "--token", bob.row["token"], env=env)
        return shown if "Please look at `auth.py`." in shown else None

    shown = wait_until(listed, what="the message in `courier inbox`")
    assert "Review auth" in shown and "from Alice" in shown

    table = courier("delivery", delivery_id.group(0), "--token", project.token, env=env)
    for stage in ("admitted", "target_selected", "dispatch_started",
                  "provider_result_recorded", "delivery_observed"):
        assert stage in table
    assert "outcome accepted" in table


def test_an_api_error_exits_non_zero_with_its_code(project: Project):
    alice = project.agent("Alice")
    env = {**os.environ, "COURIER_URL": project.stack.api_url}
    done = subprocess.run([*COURIER, "send", "--to", "Nobody", "--subject", "x", "--body", "y",
                           "--token", alice.row["token"]], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert "RECIPIENT_NOT_FOUND" in done.stderr


def _up(data_dir: Path, ports: dict[str, int]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update({"COURIER_DATA_DIR": str(data_dir), "COURIER_PORT": str(ports["api"]),
                "COURIER_EMBEDDED_PORT": str(ports["store"]),
                "COURIER_FLOWER_PORT": str(ports["flower"])})
    return subprocess.Popen([*COURIER, "up"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        output, _ = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"courier up did not stop on SIGINT:\n{output[-3000:]}")
    return output


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(180)
def test_courier_up_runs_the_stack_stops_on_ctrl_c_and_keeps_data(tmp_path: Path):
    ports = {"api": free_port(), "store": free_port(), "flower": free_port()}
    url = f"http://127.0.0.1:{ports['api']}"
    proc = _up(tmp_path / "data", ports)
    try:
        wait_until(lambda: proc.poll() is not None or _healthy(url), 60, 0.2, "courier up")
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        operator = (tmp_path / "data" / "operator-token").read_text().strip()
        with CourierClient(url, operator) as op:
            p = op.create_project("/srv/up-test")
        with CourierClient(url, p["token"]) as admin:
            alice = admin.register_agent(p["project_id"], "Alice")
            bob = admin.register_agent(p["project_id"], "Bob")
        with CourierClient(url, alice["token"]) as a, CourierClient(url, bob["token"]) as b:
            sent = a.send(["Bob"], "Hello", "from up")
            wait_until(lambda: b.inbox()["messages"], 30, what="delivery under courier up")
        assert httpx.get(f"http://127.0.0.1:{ports['flower']}/", timeout=5).status_code == 200
    finally:
        output = _stop(proc)
    assert proc.returncode == 0, output[-3000:]
    for name in ("API:", "Flower:", "operator token"):
        assert name in output

    proc = _up(tmp_path / "data", ports)
    try:
        wait_until(lambda: proc.poll() is not None or _healthy(url), 60, 0.2, "courier up again")
        with CourierClient(url, bob["token"]) as b:
            assert b.get_message(sent["id"])["body_md"] == "from up"
    finally:
        _stop(proc)
