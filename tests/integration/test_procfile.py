"""The Procfile run by honcho against an external store, with Flower behind the operator token."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from messaging.client import CourierClient
from messaging.launch.embedded import EmbeddedStore
from tests.stack import ROOT, free_port, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow


def _answers(url: str, auth: tuple[str, str] | None = None) -> bool:
    try:
        return httpx.get(url, auth=auth, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(240)
def test_honcho_runs_the_procfile_with_an_external_store(tmp_path: Path):
    store = EmbeddedStore(tmp_path / "external", port=free_port())
    store.start()
    api_port, flower_port = free_port(), free_port()
    token = "cop_" + secrets.token_urlsafe(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update({
        # The Procfile's `python` is the interpreter Courier is installed in.
        "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        "COURIER_REDIS_URL": store.url,
        "COURIER_DATA_DIR": str(tmp_path / "data"),
        "COURIER_PORT": str(api_port),
        "COURIER_FLOWER_PORT": str(flower_port),
        "COURIER_OPERATOR_TOKEN": token,
    })
    log = tmp_path / "honcho.log"
    with log.open("wb") as out:
        honcho = subprocess.Popen(
            [sys.executable, "-m", "honcho", "start", "-f", str(ROOT / "Procfile"),
             "-d", str(ROOT)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{api_port}"
    flower = f"http://127.0.0.1:{flower_port}"

    def shown() -> str:
        return log.read_text(errors="replace")[-4000:]

    try:
        wait_until(lambda: honcho.poll() is not None or _answers(api + "/readyz"), 90, 0.2,
                   "the API under honcho")
        assert honcho.poll() is None, shown()
        with CourierClient(api, token) as op:
            p = op.create_project(f"/srv/honcho-{secrets.token_hex(4)}")
        with CourierClient(api, p["token"]) as admin:
            alice = admin.register_agent(p["project_id"], "Alice")
            bob = admin.register_agent(p["project_id"], "Bob")
        with CourierClient(api, alice["token"]) as a, CourierClient(api, bob["token"]) as b:
            a.send(["Bob"], "Hello", "from honcho")
            wait_until(lambda: b.inbox()["messages"], 60, what="delivery by the Procfile's worker")

        wait_until(lambda: _answers(flower + "/healthcheck", ("operator", token)), 60, 0.2,
                   "Flower")
        assert httpx.get(flower + "/", timeout=5).status_code == 401
        assert httpx.get(flower + "/api/workers", timeout=5).status_code == 401
        auth = ("operator", token)
        assert httpx.get(flower + "/", auth=auth, timeout=5).status_code == 200
        assert httpx.get(flower + "/", auth=("operator", "wrong"), timeout=5).status_code == 401
        def listed() -> set[str]:
            workers = httpx.get(flower + "/api/workers", auth=auth, timeout=10).json()
            names = {name.partition("@")[0] for name in workers}
            return names if {"inbox", "webhook"} <= names else set()

        # The Procfile's `workers` line: one worker per installed transport, each
        # listed by Flower without asking it to refresh (the workers start after it).
        wait_until(listed, 30, what="Flower's API listing both workers")
        assert "workers.1 | worker-webhook | " in log.read_text(errors="replace"), shown()

        assert honcho.poll() is None, shown()
        assert "store.1 | store: COURIER_REDIS_URL is set, the store runs elsewhere; idle" in (
            " ".join(log.read_text(errors="replace").split()))
    finally:
        if honcho.poll() is None:
            os.killpg(honcho.pid, signal.SIGTERM)
        try:
            honcho.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait()
        store.stop()
