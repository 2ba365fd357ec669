"""The containers' healthchecks: each says 0 when its process answers, 1 when it does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.stack import ROOT, Stack, free_port, make_stack, wait_until


def _check(stack: Stack, name: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "messaging.launch.healthcheck", name],
                          cwd=ROOT, env={**stack.env, **env}, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_each_healthcheck_follows_its_process(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    try:
        assert _check(stack, "api").returncode == 0
        down = _check(stack, "api", COURIER_PORT=str(free_port()))
        assert down.returncode == 1 and "api:" in down.stderr

        assert _check(stack, "beat").returncode == 1  # no schedule yet
        stack.spawn("beat", ["-m", "celery", "-A", "workers.app", "beat", "-s",
                             str(tmp_path / "data" / "celerybeat-schedule")])
        wait_until(lambda: _check(stack, "beat").returncode == 0, 30, 0.5, what="beat")

        missing = _check(stack, "workers")
        assert missing.returncode == 1 and "no answer from inbox@" in missing.stderr
        stack.spawn("workers", ["-m", "messaging.launch.workerpool"])
        wait_until(lambda: _check(stack, "workers").returncode == 0, 60, 0.5,
                   what="the pool's workers")

        _, url = stack.start_flower(["-m", "messaging.launch.flower"])
        port = url.rsplit(":", 1)[1]
        assert _check(stack, "flower", COURIER_FLOWER_PORT=port).returncode == 0
        wrong = _check(stack, "flower", COURIER_FLOWER_PORT=port,
                       COURIER_OPERATOR_TOKEN="cop_wrong")
        assert wrong.returncode == 1 and "401" in wrong.stderr
    finally:
        stack.stop()
