"""The benchmark harness runs end to end in its quick mode, so it cannot rot."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent.parent
# On two cores it takes three and a half minutes alone, and was seen past eight
# beside the rest of the slow tier: the bound is about four times the lone run.
QUICK_RUN_TIMEOUT_S = 900
# After a timeout the harness gets this long to stop its processes (SIGTERM unwinds it).
STOP_GRACE_S = 15


def run_quick(results_dir: Path) -> tuple[int, str]:
    """``python -m bench --quick`` with one API process per server (lean, as the test
    stacks are): its exit code and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "--quick", "--api-processes", "1",
         "--results-dir", str(results_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _, err = proc.communicate(timeout=QUICK_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        pytest.fail(f"the quick run took over {QUICK_RUN_TIMEOUT_S} s:\n{err[-4000:]}")
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.timeout(QUICK_RUN_TIMEOUT_S + STOP_GRACE_S + 30)
def test_quick_run_exits_0_and_writes_every_scenario(tmp_path: Path) -> None:
    code, err = run_quick(tmp_path)
    assert code == 0, err[-4000:]
    [written] = tmp_path.glob("*.json")
    result = json.loads(written.read_text())
    assert set(result["scenarios"]) == set(SCENARIOS)
    assert result["quick"] is True
    assert {row["scenario"] for row in result["table"]} >= {"admission", "stack", "delivery",
                                                           "end to end", "scale", "mcp"}
    assert result["api_processes"] == 1
