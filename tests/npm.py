"""npm packages the tests run, installed once into a cache directory kept across runs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

CACHE = Path.home() / ".cache" / "courier-tests"
INSTALL_TIMEOUT_S = 300


def installed(name: str, packages: dict[str, str]) -> Path:
    """A directory whose ``node_modules`` holds ``packages`` (name: version), installed
    there the first time and whenever the versions change; skips the test, saying why,
    without npm or when the install fails."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("node and npm are not installed: the npm tools cannot be run")
    root = CACHE / name
    root.mkdir(parents=True, exist_ok=True)
    manifest = json.dumps({"name": name, "private": True, "dependencies": packages}, indent=1)
    wanted = root / "package.json"
    fresh = all((root / "node_modules" / p / "package.json").is_file() for p in packages)
    if fresh and wanted.is_file() and wanted.read_text() == manifest:
        return root
    wanted.write_text(manifest)
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=root,
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        pytest.skip(f"npm install of {sorted(packages)} failed: {done.stderr[-500:]}")
    return root
