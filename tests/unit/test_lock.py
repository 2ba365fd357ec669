"""The venv holds what requirements.lock pins, and constraints.txt (the image's) agrees with it."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
CONSTRAINTS = ROOT / "constraints.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def pins(text: str) -> dict[str, str]:
    """{distribution name: version} of every ``name==version`` line."""
    return {canonicalize_name(name): pinned for name, pinned in PIN.findall(text)}


def off_the_lock(locked: dict[str, str]) -> dict[str, str | None]:
    """{name: version installed here, None if none} of each pin this venv does not hold."""
    found: dict[str, str | None] = {}
    for name, pinned in locked.items():
        try:
            installed: str | None = version(name)
        except PackageNotFoundError:
            installed = None
        if installed != pinned:
            found[name] = installed
    return found


def test_the_venv_holds_every_version_the_lock_pins() -> None:
    locked = pins(LOCK.read_text())
    assert {"fastapi", "uvicorn", "mcp", "kombu", "celery", "pytest"} <= set(locked)
    assert not off_the_lock(locked), f"installed instead of the lock's: {off_the_lock(locked)}"


def test_the_check_does_catch_a_version_off_the_lock() -> None:
    locked = pins(LOCK.read_text())
    doctored = {**locked, "fastapi": "0.1.0", "no-such-distribution": "1.0"}
    assert off_the_lock(doctored) == {"fastapi": locked["fastapi"], "no-such-distribution": None}


def test_the_image_s_constraints_are_the_lock_s_versions() -> None:
    locked = pins(LOCK.read_text())
    image = pins(CONSTRAINTS.read_text())
    assert image, "constraints.txt pins nothing"
    differ = {name: (pinned, locked.get(name)) for name, pinned in image.items()
              if locked.get(name) != pinned}
    assert not differ, f"constraints.txt against the lock (run ./dev lock): {differ}"
