"""Celery's own CLI, as an operator runs it beside a stack with only its data
directory named (docs/operations.md): it reaches that stack's store, whatever port
the embedded server took."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from messaging.config import EMBEDDED_URL_FILE
from tests.stack import ROOT, STORE, Stack, make_stack

pytestmark = pytest.mark.skipif(
    STORE != "node", reason="the data directory names an embedded server only; a cluster "
    "store is always given by COURIER_REDIS_URL")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("celery-cli"))
    try:
        s.start_worker(beat=False)
        yield s
    finally:
        s.stop()


def celery(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env["COURIER_DATA_DIR"] = stack.env["COURIER_DATA_DIR"]
    return subprocess.run([sys.executable, "-m", "celery", "-A", "workers.app", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_inspect_ping_with_only_the_data_dir_reaches_the_stacks_workers(stack: Stack):
    url_file = stack.root / "data" / EMBEDDED_URL_FILE
    assert url_file.exists() and f":{stack.store.port}/" in url_file.read_text()
    assert stack.store.port != 6399  # not the embedded store's default port
    done = celery(stack, "inspect", "ping", "--timeout", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pong" in done.stdout
