"""The ``courier`` command against real processes: up, send, reply, inbox, delivery, agents."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from messaging.client import CourierClient
from tests.integration.conftest import Project
from tests.stack import ROOT, free_port, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

COURIER = [sys.executable, "-m", "messaging.cli"]


def courier(*args: str, env: dict[str, str], stdin: str | None = None,
            cwd: Path = ROOT) -> str:
    """Run one ``courier`` command; its stdout (fails the test on a non-zero exit)."""
    done = subprocess.run([*COURIER, *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def client_env(project: Project, **extra: str) -> dict[str, str]:
    """The environment of a person's terminal: no COURIER_* but the API's URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    return {**env, "COURIER_URL": project.stack.api_url, "COLUMNS": "80", **extra}


def test_project_create_elsewhere_reads_the_servers_token_from_its_data_dir(
    project: Project, tmp_path: Path
):
    data_dir = tmp_path / "server-data"
    data_dir.mkdir()
    (data_dir / "operator-token").write_text(project.stack.operator_token + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = client_env(project, COURIER_DATA_DIR=str(data_dir))
    shown = courier("project", "create", f"/srv/{uuid.uuid4().hex}", env=env, cwd=elsewhere)
    assert re.search(r"project token \(shown once\): \S{20,}", shown), shown
    assert list(elsewhere.iterdir()) == []


def test_project_create_with_a_token_that_is_not_the_servers_explains_and_writes_nothing(
    project: Project, tmp_path: Path
):
    done = subprocess.run([*COURIER, "project", "create", "/srv/x", "--token", "cop_wrong"],
                          capture_output=True, text=True, env=client_env(project), cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 3  # not authenticated
    assert "UNAUTHENTICATED" in done.stderr and "not this server's" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_agent_register_with_a_webhook_prints_the_generated_secret(project: Project):
    shown = courier("agent", "register", project.project_id, "Hook", "--webhook",
                    "http://127.0.0.1:9/hook", "--token", project.token, env=client_env(project))
    secret = re.search(r"webhook secret \(shown once\): (whsec_\S+)", shown)
    assert secret, shown
    assert re.search(r"agent token \(shown once\): \S{20,}", shown), shown


def test_reply_read_ack_redrive_retire_and_close_commands(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    env = client_env(project)
    sent = alice.api.send(["Bob"], "Plan", "the plan")
    wait_until(lambda: bob.api.inbox()["messages"], what="Bob's copy")

    replied = courier("reply", sent["id"], "--token", bob.row["token"], env=env,
                      stdin="looks good\n")
    assert re.search(r"admitted msg_\S+", replied), replied
    answer = wait_until(lambda: alice.api.inbox()["messages"], what="the reply")[0]
    assert answer["subject"] == "Re: Plan" and answer["body_md"] == "looks good\n"

    read = courier("read", sent["id"], "--token", bob.row["token"], env=env)
    assert f"{sent['id']}: read 20" in read and "acknowledged -" in read
    acked = courier("ack", sent["id"], "--token", bob.row["token"], env=env)
    assert "acknowledged 20" in acked

    # An accepted delivery is not sent again: the command says why, with the code.
    delivery_id = sent["delivery"]["observations"][0]["delivery_id"]
    refused = subprocess.run([*COURIER, "redrive", delivery_id, "--token", project.token],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert refused.returncode == 5  # conflict
    assert "409 DELIVERY_NOT_REDRIVABLE" in refused.stderr and delivery_id in refused.stderr

    retired = courier("agent", "retire", project.project_id, "Bob", "--token", project.token,
                      env=env)
    assert f"{bob.label} ({bob.id}): retired" in retired
    closed = courier("agent", "close", project.project_id, alice.label, "--token",
                     project.token, env=env)
    assert f"{alice.label} ({alice.id}): closed" in closed
    rows = {r["agent_id"]: r["status"] for r in project.admin.list_agents(project.project_id)}
    assert rows == {alice.id: "closed", bob.id: "retired"}


def test_agents_and_inbox_keep_timestamps_and_ids_whole_at_80_columns(project: Project):
    alice = project.agent("A long agent name for narrow terminals")
    bob = project.agent("Bob")
    sent = alice.api.send(["Bob"], "A subject long enough to fill a good part of the line",
                          "body")
    env = client_env(project)
    page = wait_until(lambda: bob.api.inbox()["messages"], what="the message")
    shown = courier("inbox", "--token", bob.row["token"], env=env)
    for whole in (sent["id"], page[0]["delivery_id"], page[0]["created_ts"]):
        assert whole in shown, f"{whole} cut in:\n{shown}"
    table = courier("agents", project.project_id, "--token", project.token, env=env)
    for row in project.admin.list_agents(project.project_id):
        assert row["last_active_ts"] in table, f"{row['last_active_ts']} cut in:\n{table}"
    assert max(map(len, table.splitlines())) <= 80


def test_thread_shows_a_page_and_the_command_for_the_next(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    first = alice.api.send("Bob", "Plan", "step 0")
    for n in range(1, 5):
        alice.api.send("Bob", "Plan", f"step {n}", thread_id=first["thread_id"])
    env = client_env(project, COLUMNS="200")
    shown = courier("thread", first["thread_id"], "--limit", "3", "--token", bob.row["token"],
                    env=env)
    assert [f"step {n}" in shown for n in range(5)] == [True] * 3 + [False] * 2
    more = re.search(rf"more: courier thread {first['thread_id']} --cursor (\d+)", shown)
    assert more, shown
    rest = courier("thread", first["thread_id"], "--cursor", more[1], "--token",
                   project.token, env=env)
    assert [f"step {n}" in rest for n in range(5)] == [False] * 3 + [True] * 2
    assert "end of thread" in rest


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
    # A plain read shows a person the mail, not the agent's conversation: not observed.
    table = courier("delivery", delivery_id.group(0), "--token", project.token, env=env)
    assert "provider_result_recorded" in table and "delivery_observed" not in table

    courier("inbox", "--shown", "--token", bob.row["token"], env=env)
    table = courier("delivery", delivery_id.group(0), "--token", project.token, env=env)
    for stage in ("admitted", "target_selected", "dispatch_started",
                  "provider_result_recorded", "delivery_observed"):
        assert stage in table
    assert "outcome accepted" in table


def test_send_takes_every_field_of_the_api(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    project.agent("Carol"), project.agent("Dan")
    first = alice.api.send(["Bob"], "Plan", "x")
    env = client_env(project)
    shown = courier("send", "--to", "Bob", "--cc", "Carol", "--bcc", "Dan", "--subject", "Go",
                    "--body", "# Go", "--importance", "high", "--ack-required",
                    "--notification-policy", "wake", "--delivery-policy", "durable",
                    "--thread-id", first["thread_id"], "--topic", "deploy",
                    "--idempotency-key", "cli-1", "--summary", "my label", "--sender-name",
                    "Alice", "--project-key", project.project_key, "--json",
                    "--token", alice.row["token"], env=env)
    sent = alice.api.get_message(json.loads(shown)["id"])
    assert (sent["cc"], sent["bcc"], sent["thread_id"], sent["topic"]) == (
        ["Carol"], ["Dan"], first["thread_id"], "deploy")
    assert (sent["importance"], sent["ack_required"], sent["notification_policy"],
            sent["delivery_policy"]) == ("high", True, "wake", "durable")
    assert sent["summary"] == "my label"
    again = courier("send", "--to", "Bob", "--cc", "Carol", "--bcc", "Dan", "--subject", "Go",
                    "--body", "# Go", "--importance", "high", "--ack-required",
                    "--notification-policy", "wake", "--delivery-policy", "durable",
                    "--thread-id", first["thread_id"], "--topic", "deploy",
                    "--idempotency-key", "cli-1", "--json", "--token", alice.row["token"],
                    env=env)
    assert json.loads(again)["idempotent_replay"] is True
    assert bob.api.get_message(sent["id"])["bcc"] == []


def test_send_takes_a_resource_notice_and_courier_writes_its_text(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    shown = courier("send", "--to", "Bob", "--resource-id", "db-lock", "--phase-id",
                    "migrate:1", "--state", "released", "--next-action", "retry_admission",
                    "--idempotency-key", "notice-1", "--json", "--token", alice.row["token"],
                    env=client_env(project))
    sent = bob.api.get_message(json.loads(shown)["id"])
    assert sent["subject"] == "Alice reports `db-lock` released (phase migrate:1)"
    assert sent["notification_policy"] == "wake"


def test_an_api_error_exits_with_its_code(project: Project):
    alice = project.agent("Alice")
    env = {**os.environ, "COURIER_URL": project.stack.api_url}
    done = subprocess.run([*COURIER, "send", "--to", "Nobody", "--subject", "x", "--body", "y",
                           "--token", alice.row["token"]], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 4  # not found
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


def _flower_up(url: str, token: str) -> bool:
    try:
        return httpx.get(url + "healthcheck", auth=("operator", token),
                         timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


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
        flower = f"http://127.0.0.1:{ports['flower']}/"
        wait_until(lambda: _flower_up(flower, operator), 60, 0.2, "Flower")
        assert httpx.get(flower, timeout=5).status_code == 401
        assert httpx.get(flower, auth=("operator", operator), timeout=5).status_code == 200
    finally:
        output = _stop(proc)
    assert proc.returncode == 0, output[-3000:]
    for name in ("API:", "Flower:", "operator token", f"data:   {tmp_path / 'data'}"):
        assert name in output
    # The banner names the token's file; no secret is ever printed.
    assert f"operator token: new, in {tmp_path / 'data' / 'operator-token'}" in output
    assert operator not in output
    assert (tmp_path / "data" / "store-password").read_text().strip() not in output

    proc = _up(tmp_path / "data", ports)
    try:
        wait_until(lambda: proc.poll() is not None or _healthy(url), 60, 0.2, "courier up again")
        with CourierClient(url, bob["token"]) as b:
            assert b.get_message(sent["id"])["body_md"] == "from up"
    finally:
        _stop(proc)
