"""Install the courier-echo distribution (a transport plug-in) into the test venv."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

ECHO_DIR = Path(__file__).resolve().parent / "courier-echo"


def _installed() -> bool:
    try:
        distribution("courier-echo")
    except PackageNotFoundError:
        return False
    return True


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q",
                           *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


@contextmanager
def echo_installed() -> Iterator[None]:
    """courier-echo installed for the duration (removed after, unless it was there before)."""
    was_there = _installed()
    if not was_there:
        _pip("install", "--no-deps", str(ECHO_DIR))
    try:
        yield
    finally:
        if not was_there:
            _pip("uninstall", "-y", "courier-echo")
