"""The soak harness runs end to end in its quick mode, so it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
QUICK_RUN_TIMEOUT_S = 240


@pytest.mark.slow
@pytest.mark.timeout(QUICK_RUN_TIMEOUT_S + 30)
def test_quick_soak_reports_slopes_and_keeps_the_store_bounded(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.soak", "--quick", "--results-dir",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=QUICK_RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    [written] = tmp_path.glob("soak-*.json")
    result = json.loads(written.read_text())
    assert set(result["rss_mb_per_h_after_warm_up"]) == {
        "api", "store", "worker-inbox", "worker-webhook", "beat", "flower"}
    assert result["per_minute"][0]["statuses"] == {"201": result["sent"]}
    assert result["store_bytes_per_stored_message"] > 0
    # Under a retention of seconds some of what was sent is already gone (how much
    # depends on how fast this machine delivers: only final messages go).
    assert 0 < result["stored_messages_end"] < result["sent"]
