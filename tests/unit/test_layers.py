"""The import layers of pyproject.toml hold on this tree, and the check fails on a back arrow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120,
    )


def _copy_tree(dest: Path) -> Path:
    for package in ("messaging", "workers"):
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_layers_hold_on_this_tree() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "back_arrow", "contract"),
    [
        ("messaging/store/keys.py", "import workers.app", "never the reverse"),
        ("messaging/store/keys.py", "import messaging.service.sending", "layers point down"),
        ("messaging/service/views.py", "import messaging.web.app", "layers point down"),
        ("messaging/transports/base.py", "import messaging.store.deliveries",
         "not the store's types"),
        ("messaging/config.py", "import messaging.ids", "settings import nothing"),
        ("messaging/service/views.py", "import messaging.launch.supervisor",
         "layers point down"),
        ("messaging/runtime/publish.py", "import messaging.service.sending",
         "layers point down"),
        ("messaging/web/app.py", "import messaging.launch.embedded", "layers point down"),
        ("messaging/hosts/mcp_stdio.py", "import messaging.store.store", "speak only HTTP"),
        ("messaging/client.py", "import messaging.service.sending", "speak only HTTP"),
        ("messaging/hosts/claude_code.py", "import messaging.web.app", "speak only HTTP"),
        ("messaging/hosts/watching.py", "import messaging.runtime.publish", "speak only HTTP"),
        ("messaging/settingsdoc.py", "import messaging.cli", "side modules import no layer"),
        ("messaging/ids.py", "import messaging.store.keys", "side modules import no layer"),
        ("messaging/models.py", "import messaging.web.app", "side modules import no layer"),
        ("messaging/errors.py", "import messaging.client", "side modules import no layer"),
        ("workers/tasks.py", "import messaging.web.app", "never on a face"),
    ],
)
def test_an_import_against_a_layer_fails_the_check(
    tmp_path: Path, module: str, back_arrow: str, contract: str
) -> None:
    tree = _copy_tree(tmp_path)
    with (tree / module).open("a") as source:
        source.write(f"\n{back_arrow}  # noqa\n")
    result = _lint_imports(tree)
    assert result.returncode != 0
    # The contract is named under "Broken contracts", not only in the list of all.
    _, _, broken = result.stdout.partition("Broken contracts")
    assert contract in broken, result.stdout
