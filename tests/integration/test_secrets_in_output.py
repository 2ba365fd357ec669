"""The store's password stays out of what Courier's processes print, a login failure says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from messaging.launch.embedded import EmbeddedStore
from tests.stack import ROOT, free_port

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

WRONG = "wr0ng-pa55word-x7"
START_AND_FAIL_WITHIN_S = 20.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStore]:
    with EmbeddedStore(tmp_path_factory.mktemp("store"), free_port()) as running:
        yield running


def courier_env(data_dir: Path, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update(COURIER_DATA_DIR=str(data_dir), COURIER_REDIS_URL=redis_url,
               COURIER_PORT=str(free_port()), COURIER_FLOWER_PORT=str(free_port()))
    return env


def courier_up(env: dict[str, str]) -> tuple[int, str, float]:
    """Run ``courier up`` until it exits on its own: its code, output and how long it took."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "messaging.cli", "up"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def test_a_wrong_store_password_says_authentication_failed_and_is_never_shown(
        store: EmbeddedStore, tmp_path: Path):
    url = f"redis://:{WRONG}@127.0.0.1:{store.port}/0"
    code, output, took_s = courier_up(courier_env(tmp_path, url))
    assert code == 1, output
    assert "authentication failed" in output
    assert "did not answer" not in output
    assert f"redis://***@127.0.0.1:{store.port}/0" in output
    assert WRONG not in output
    assert took_s < START_AND_FAIL_WITHIN_S  # a wrong password is not waited on


def test_a_store_that_does_not_answer_is_named_without_its_password(tmp_path: Path):
    url = f"redis://courier:{WRONG}@127.0.0.1:{free_port()}/0"
    code, output, _ = courier_up(courier_env(tmp_path, url))
    assert code == 1, output
    assert "did not answer" in output and "redis://courier:***@127.0.0.1:" in output
    assert WRONG not in output


def test_a_worker_with_a_wrong_store_password_never_prints_it(store: EmbeddedStore,
                                                               tmp_path: Path):
    env = courier_env(tmp_path, f"redis://:{WRONG}@127.0.0.1:{store.port}/0")
    with subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.app", "worker",
                           "-Q", "deliver.inbox", "-c", "1", "--loglevel", "INFO"], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True) as proc:
        time.sleep(8)  # it tries the broker, fails to log in, and says so
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=10)
    assert "127.0.0.1" in output  # it did say where it tried
    assert WRONG not in output
