"""``courier hook install``/``uninstall`` and files of the user's that they must not
harm (docs/hosts.md): symbolic links, hooks that only look like Courier's, shapes
Claude Code would not read."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from messaging.cli.hooks import HOOK_MARK

# Each test starts `courier` processes of its own: the slow tier.
pytestmark = pytest.mark.slow

COURIER = [sys.executable, "-m", "messaging.cli"]
ACTIONS = ("install", "uninstall")


def courier(action: str, project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COURIER, "hook", action, "claude-code", "--project", str(project)],
                          capture_output=True, text=True, cwd=project, timeout=60)


def files_of(root: Path) -> dict[str, bytes | str]:
    """Every file and link under ``root``: a file's bytes, a link's target."""
    return {str(p.relative_to(root)): (f"-> {p.readlink()}" if p.is_symlink() else p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_symlink() or p.is_file()}


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("link", [".claude/settings.json", ".claude", ".mcp.json"])
def test_a_symbolic_link_is_refused_naming_its_target_and_nothing_is_written(
        tmp_path: Path, link: str, action: str):
    elsewhere, project = tmp_path / "home", tmp_path / "project"
    (elsewhere / ".claude").mkdir(parents=True)
    (elsewhere / ".claude" / "settings.json").write_text('{"model": "mine"}\n')
    (elsewhere / ".mcp.json").write_text('{"mcpServers": {}}\n')
    project.mkdir()
    if action == "uninstall":
        assert courier("install", project).returncode == 0
    (project / link).parent.mkdir(exist_ok=True)
    target = elsewhere / link
    if (project / link).is_dir():
        shutil.rmtree(project / link)
    else:
        (project / link).unlink(missing_ok=True)
    (project / link).symlink_to(target)
    before = files_of(tmp_path)
    done = courier(action, project)
    assert done.returncode == 2, done.stderr
    assert "is a symbolic link to" in done.stderr and str(target) in done.stderr
    assert "Traceback" not in done.stderr
    assert files_of(tmp_path) == before


def test_uninstall_takes_out_only_what_install_wrote(tmp_path: Path):
    settings, mcp = tmp_path / ".claude" / "settings.json", tmp_path / ".mcp.json"
    settings.parent.mkdir()
    # The user's own: hooks whose commands end as Courier's did, and a courier
    # server of their own (with its env).
    settings.write_text(json.dumps({"hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "./my-wrapper hook claude-code"}]}],
        "SessionStart": [{"hooks": [{"type": "command",
                                     "command": "ssh box courier hook claude-code"}]}]}}))
    mcp.write_text(json.dumps({"mcpServers": {"courier": {
        "command": "courier", "args": ["mcp"], "env": {"COURIER_URL": "http://box:8787"}}}}))
    before = {path: json.loads(path.read_text()) for path in (settings, mcp)}
    assert courier("install", tmp_path).returncode == 0
    hooks = json.loads(settings.read_text())["hooks"]
    assert len(hooks["Stop"]) == 2 and hooks["Stop"][1]["hooks"][0]["command"].endswith(HOOK_MARK)
    done = courier("uninstall", tmp_path)
    assert done.returncode == 0, done.stderr
    assert {path: json.loads(path.read_text()) for path in (settings, mcp)} == before


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize(("name", "content"), [
    (".mcp.json", '{"mcpServers": [1]}'),
    (".mcp.json", '{"mcpServers": {"files": 1}}'),
    (".mcp.json", "[]"),
    (".mcp.json", "{not json"),
    (".claude/settings.json", '{"hooks": []}'),
    (".claude/settings.json", '{"hooks": {"Stop": {"hooks": []}}}'),
    (".claude/settings.json", '{"hooks": {"Stop": [1]}}'),
    (".claude/settings.json", '{"hooks": {"Stop": [{"hooks": {}}]}}'),
    (".claude/settings.json", '{"hooks": {"Stop": [{"hooks": ["x"]}]}}'),
    (".claude/settings.json", '"just a string"'),
], ids=lambda v: str(v).replace(" ", ""))
def test_a_shape_claude_code_would_not_read_is_exit_2_and_every_file_is_left_as_it_was(
        tmp_path: Path, name: str, content: str, action: str):
    # The other file is well-formed and the user's: a half install would change it.
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(
        '{"permissions": {"allow": ["Bash(npm test)"]}}\n')
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"files": {"command": "npx"}}}\n')
    (tmp_path / name).write_text(content)
    before = files_of(tmp_path)
    done = courier(action, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "error:" in done.stderr and "Traceback" not in done.stderr
    assert files_of(tmp_path) == before


def test_the_hook_installed_runs_as_claude_code_runs_it_mark_and_all(tmp_path: Path):
    assert courier("install", tmp_path).returncode == 0
    settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    [group] = settings["hooks"]["SessionStart"]
    command = group["hooks"][0]["command"]
    assert command.endswith(HOOK_MARK)
    # Claude Code runs a hook's command with a shell, the event's JSON on stdin; no
    # server listens here, so the hook says so and lets the session go on.
    event = {"session_id": "s1", "hook_event_name": "SessionStart", "cwd": str(tmp_path)}
    done = subprocess.run(["sh", "-c", command], input=json.dumps(event), capture_output=True,
                          text=True, timeout=30, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "COURIER_URL": "http://127.0.0.1:9",
                               "COURIER_TOKEN": "cat_x", "HOME": str(tmp_path),
                               "COURIER_HOOK_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 0 and "courier hook:" in done.stderr, done.stderr


def test_a_file_that_cannot_be_written_puts_back_the_one_written_before_it(tmp_path: Path):
    # .mcp.json is written first; .claude, a plain file here, cannot hold settings.json.
    (tmp_path / ".claude").write_text("not a directory\n")
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"files": {"command": "npx"}}}\n')
    before = files_of(tmp_path)
    done = courier("install", tmp_path)
    assert done.returncode == 1 and "every file is as it was" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert files_of(tmp_path) == before
