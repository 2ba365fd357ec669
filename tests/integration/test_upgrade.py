"""A rolling upgrade (docs/operations.md, Upgrading): the previous release's API, worker
and beat are replaced one at a time while mail flows, and nothing is lost.

The previous release is its own source, taken from git (the commit that wrote
tests/fixtures/previous_release) and run on PYTHONPATH with this venv: its own
``messaging`` and ``workers`` packages and its own package metadata (the
transports' entry points name its modules), the same dependencies.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from messaging.client import CourierAPIError, CourierClient, CourierUnreachable
from messaging.store import keys, version
from tests.stack import ROOT, START_TIMEOUT_S, Proc, Stack, make_stack, wait_until

Json = dict[str, Any]
FIXTURE = ROOT / "tests" / "fixtures" / "previous_release" / "expected.json"


def previous_release(dest: Path) -> Path:
    """The previous release's ``messaging`` and ``workers`` under ``dest``."""
    commit = json.loads(FIXTURE.read_text())["commit"]
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"the previous release's commit {commit} is not in this checkout's git"
                    " history (a shallow clone or an exported tree)")
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "messaging",
                              "workers", "pyproject.toml"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    # Its metadata, found before this release's installed one (first on the path wins).
    project = tomllib.loads((dest / "pyproject.toml").read_text())["project"]
    info = dest / f"agent_courier-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
        for group, points in project.get("entry-points", {}).items()))
    return dest


def spawn_old(stack: Stack, old: Path, name: str, args: list[str]) -> Proc:
    """A process of the previous release: its source first on the path."""
    log = stack.root / f"old-{name}-{len(stack.procs)}.log"
    env = {**stack.env, "PYTHONPATH": str(old)}
    with log.open("wb") as out:
        popen = subprocess.Popen([sys.executable, *args], cwd=old, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    proc = Proc(name, popen, log)
    stack.procs.append(proc)
    return proc


def serving(url: str, proc: Proc) -> bool:
    """True once the API at ``url`` answers."""
    assert proc.alive(), proc.tail()
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def worker_ready(proc: Proc) -> bool:
    assert proc.alive(), proc.tail()
    return "ready." in proc.log.read_text(errors="replace")


class Sender:
    """Sends from one agent while the stack is upgraded under it: each send retried with
    its idempotency key until an API answers, as a client rides out a restart."""

    def __init__(self, client: CourierClient) -> None:
        self.client = client
        self.sent: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            body = {"to": ["Bob"], "subject": f"n{i}", "body_md": f"send {i}",
                    "idempotency_key": f"rolling-{i}"}
            try:
                self.sent.append(self.client.request("POST", "/v1/messages", json=body)["id"])
                i += 1
            except (CourierUnreachable, CourierAPIError):
                time.sleep(0.05)  # an API restarting: the same send again
            time.sleep(0.01)

    def wait_for(self, more: int) -> None:
        target = len(self.sent) + more
        wait_until(lambda: len(self.sent) >= target, 30, what=f"{more} more sends")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_rolling_upgrade_from_the_previous_release_loses_no_mail(tmp_path: Path):
    old = previous_release(tmp_path / "previous")
    stack = make_stack(tmp_path / "stack", store_kind="node")
    try:
        stack.procs.pop().stop()  # this release's API: the deployment starts on the previous
        with stack.redis() as r:
            r.flushall()
        port = stack.env["COURIER_PORT"]
        api_args = ["-m", "uvicorn", "messaging.web.app:app", "--host", "127.0.0.1",
                    "--port", port, "--log-level", "warning"]
        worker_args = ["-m", "celery", "-A", "workers.app", "worker", "-Q",
                       "deliver.inbox,courier.sweep", "-c", "2", "--loglevel", "INFO",
                       "--without-mingle", "--without-gossip"]
        stack.api_url = f"http://127.0.0.1:{port}"
        old_api = spawn_old(stack, old, "api", api_args)
        wait_until(lambda: serving(stack.api_url, old_api), START_TIMEOUT_S, what="old API")
        old_worker = spawn_old(stack, old, "worker", [*worker_args, "-n", "old@test"])
        old_beat = spawn_old(stack, old, "beat", ["-m", "celery", "-A", "workers.app", "beat",
                                                  "-s", str(stack.root / "old-beat")])
        wait_until(lambda: worker_ready(old_worker), START_TIMEOUT_S, what="old worker")

        with stack.operator() as op:
            p = op.create_project("/srv/checkouts/rolling")
        with stack.client(p["token"]) as admin:
            alice = stack.client(admin.register_agent(p["project_id"], "Alice")["token"])
            bob = stack.client(admin.register_agent(p["project_id"], "Bob")["token"])
        with stack.redis() as r:
            assert r.get(keys.DATA_VERSION) is None  # the previous release records none
        sender = Sender(alice)
        sender.thread.start()
        sender.wait_for(20)

        # 1. The API: the new one migrates the store as it starts; old workers deliver.
        old_api.stop()
        new_api, _ = stack.start_api(port=int(port))
        with stack.redis() as r:
            assert r.get(keys.DATA_VERSION) == str(version.CURRENT)
        sender.wait_for(20)
        admitted_by_new = list(sender.sent)
        wait_until(lambda: len(list(bob.iter_inbox(limit=200))) >= len(admitted_by_new),
                   30, what="the previous release's worker delivering the new API's mail")

        # 2. The workers: a new one beside the old, then the old one stops.
        stack.start_worker(beat=False)
        sender.wait_for(10)
        old_worker.stop()
        assert old_worker.popen.returncode == 0, old_worker.tail()
        sender.wait_for(10)

        # 3. Beat last: one at a time.
        old_beat.stop()
        new_beat = stack.spawn("beat", ["-m", "celery", "-A", "workers.app", "beat", "-s",
                                        str(stack.root / "new-beat")])
        sender.wait_for(10)
        sender.stop.set()
        sender.thread.join(30)
        assert new_api.alive() and new_beat.alive()

        sent = sender.sent
        got = wait_until(lambda: len(x := [m["id"] for m in bob.iter_inbox(limit=200)])
                         >= len(sent) and x, 60, 0.2, "every send in Bob's inbox")
        assert sorted(got) == sorted(sent)  # each once, none lost
        for mid in sent[:: max(1, len(sent) // 10)]:
            [delivery] = alice.message_deliveries(mid)
            assert delivery["outcome"] == "accepted"
        alice.close()
        bob.close()
    finally:
        stack.stop()
