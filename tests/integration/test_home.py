"""One home for a deployment's state: every process finds the operator token in
COURIER_DATA_DIR; only `courier up` and `courier init` ever create one."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.stack import ROOT, Stack, free_port, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

COURIER = [sys.executable, "-m", "messaging.cli"]


def _env(stack: Stack, data_dir: Path, **extra: str) -> dict[str, str]:
    """A server process's environment: the stack's store, this data dir, no token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    return {**env, "COURIER_REDIS_URL": stack.env["COURIER_REDIS_URL"],
            "COURIER_DATA_DIR": str(data_dir), **extra}


@pytest.mark.parametrize("argv", [
    [*COURIER, "run", "api"],
    [*COURIER, "run", "flower"],
    [*COURIER, "run", "beat"],
    [sys.executable, "-m", "uvicorn", "messaging.web.app:app", "--port", "0"],
    [sys.executable, "-m", "messaging.launch.flower", "--port=0"],
    [sys.executable, "-m", "celery", "-A", "workers.app", "beat", "-s", "{data_dir}/schedule"],
], ids=["run api", "run flower", "run beat", "uvicorn as honcho runs it", "flower module",
        "beat as honcho runs it"])
def test_a_process_started_where_there_is_no_operator_token_refuses_and_says_where_it_looked(
    stack: Stack, tmp_path: Path, argv: list[str]
):
    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    argv = [arg.format(data_dir=data_dir) for arg in argv]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=elsewhere, timeout=60,
                          env=_env(stack, data_dir, COURIER_PORT=str(free_port())))
    shown = done.stdout + done.stderr
    assert done.returncode != 0, shown
    assert str(data_dir / "operator-token") in shown, shown
    assert "courier init" in shown, shown
    # Nothing made but beat's schedule (opened before beat says it is starting).
    assert [p.name for p in data_dir.iterdir() if not p.name.startswith("schedule.")] == []
    assert list(elsewhere.iterdir()) == []


def test_courier_init_creates_the_token_once_and_owner_only(tmp_path: Path):
    data_dir = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env["COURIER_DATA_DIR"] = str(data_dir)
    first = subprocess.run([*COURIER, "init"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=60)
    assert first.returncode == 0, first.stderr
    token_file = data_dir / "operator-token"
    token = token_file.read_text().strip()
    assert token.startswith("cop_") and token not in first.stdout
    assert str(token_file) in first.stdout and "created" in first.stdout
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    again = subprocess.run([*COURIER, "init"], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=60)
    assert again.returncode == 0 and "already" in again.stdout
    assert token_file.read_text().strip() == token


@pytest.mark.timeout(120)
def test_two_apis_started_from_different_directories_share_the_data_dirs_token(
    stack: Stack, tmp_path: Path
):
    data_dir = tmp_path / "deployment"
    subprocess.run([*COURIER, "init"], check=True, capture_output=True, timeout=60,
                   env=_env(stack, data_dir), cwd=tmp_path)
    token = (data_dir / "operator-token").read_text().strip()
    procs, urls = [], []
    try:
        for name in ("one", "two"):
            cwd = tmp_path / name
            cwd.mkdir()
            port = free_port()
            with (tmp_path / f"{name}.log").open("wb") as log:
                procs.append(subprocess.Popen(
                    [*COURIER, "run", "api"], cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, env=_env(stack, data_dir, COURIER_PORT=str(port))))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls, strict=True):
            wait_until(lambda p=proc, u=url: p.poll() is not None or _answers(u), 60, 0.2, url)
            assert proc.poll() is None
            answer = httpx.get(f"{url}/v1/projects?limit=1", timeout=5,
                               headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200, answer.text
        assert [list((tmp_path / n).iterdir()) for n in ("one", "two")] == [[], []]
        assert "Courier data directory: " + str(data_dir) in (tmp_path / "one.log").read_text()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(20)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
