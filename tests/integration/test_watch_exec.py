"""``courier watch --exec`` with the recipes of docs/hosts.md: a real tmux server with
a stand-in agent program in a pane, and Codex's notify command."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from messaging.store import keys
from tests.integration.conftest import Project
from tests.stack import ROOT, wait_until

# Each test starts `courier` processes (and tmux) of its own: the slow tier.
pytestmark = pytest.mark.slow

COURIER = [sys.executable, "-m", "messaging.cli"]
HOSTS = ROOT / "docs" / "hosts.md"
PROMPT = "ready> "
BUSY_S = 3.0
# The stand-in agent: a prompt, then each line read is "worked on" for BUSY_S,
# with every step logged with its time.
STAND_IN = f"""
log=$1
while true; do
  printf '%s idle\\n' "$(date +%s.%N)" >> "$log"
  printf '{PROMPT}'
  IFS= read -r line || exit 0
  printf '%s got %s\\n' "$(date +%s.%N)" "$line" >> "$log"
  echo working; sleep {BUSY_S}
done
"""


def recipe(marker: str, lang: str) -> str:
    """The code block of docs/hosts.md that contains ``marker``."""
    for block in re.findall(rf"```{lang}\n(.*?)```", HOSTS.read_text(), re.S):
        if marker in block:
            return str(block)
    raise AssertionError(f"no {lang} block with {marker!r} in docs/hosts.md")


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A tmux server of the test's own (its own socket directory): its environment."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux); .ci/run installs it")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURIER_", "TMUX"))}
    env["TMUX_TMPDIR"] = str(tmp_path / "tmux")
    (tmp_path / "tmux").mkdir()
    yield env
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)


def log_of(path: Path) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    return [(float(t), what) for t, _, what in
            (line.partition(" ") for line in path.read_text().splitlines())]


def test_the_tmux_recipe_types_the_mail_in_only_while_the_pane_is_idle(
        project: Project, tmp_path: Path, tmux: dict[str, str]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    script = tmp_path / "courier-tmux"
    script.write_text(recipe("courier-tmux PANE PROMPT", "sh"))
    script.chmod(0o755)
    (tmp_path / "agent.sh").write_text(STAND_IN)
    log = tmp_path / "agent.log"
    subprocess.run(["tmux", "new-session", "-d", "-s", "agent", "-x", "200", "-y", "20",
                    f"sh {tmp_path / 'agent.sh'} {log}"], env=tmux, check=True)
    wait_until(lambda: len(log_of(log)) == 1, what="the stand-in's prompt")

    env = {**tmux, "COURIER_URL": project.stack.api_url}
    watch = subprocess.Popen(
        [*COURIER, "watch", "--token", bob.row["token"], "--count", "1",
         "--exec", f"{script} agent:0.0 '{PROMPT.strip()}'"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The watcher's stream is open (it sees mail sent from now on): on a busy
        # machine its start takes seconds.
        with project.stack.redis() as r:
            wait_until(lambda: r.zcard(keys.open_streams(project.project_id, bob.id)) > 0,
                       timeout_s=30, what="the watcher's event stream open")
        # The agent is given work, and is busy with it when the mail arrives.
        subprocess.run(["tmux", "send-keys", "-t", "agent:0.0", "-l", "a task"], env=tmux,
                       check=True)
        subprocess.run(["tmux", "send-keys", "-t", "agent:0.0", "Enter"], env=tmux, check=True)
        wait_until(lambda: any(w == "got a task" for _, w in log_of(log)), what="the task")
        alice.api.send("Bob", "FYI", "nothing to do", notification_policy="quiet")
        sent = alice.api.send("Bob", "Review auth.py", "Please look.\n")
        _, err = watch.communicate(timeout=30)
        assert watch.returncode == 0, err
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    steps = wait_until(lambda: (s := log_of(log)) and len(s) >= 4 and s, what="the notice")
    got = [(t, w) for t, w in steps if w.startswith("got ")]
    assert [w for _, w in got] == [
        "got a task",
        f"got Courier mail from {alice.label}: Review auth.py ({sent['id']}); "
        "read it with your Courier tools"]
    task_at, mail_at = got[0][0], got[1][0]
    idle_again = min(t for t, w in steps if w == "idle" and t > task_at)
    assert mail_at >= idle_again >= task_at + BUSY_S - 0.1  # typed only once idle again


def test_the_codex_notify_command_sets_idle_whatever_json_it_is_given(project: Project):
    bob = project.agent("Bob")
    bob.api.set_presence("busy")
    argv = json.loads(re.search(r"notify = (\[.*\])", HOSTS.read_text())[1])  # type: ignore[index]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    bin_dir = Path(sys.executable).parent
    env.update(COURIER_URL=project.stack.api_url, COURIER_TOKEN=bob.row["token"],
               PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    turn = json.dumps({"type": "agent-turn-complete", "turn-id": "1",
                       "last-assistant-message": "done"})
    done = subprocess.run([*argv, turn], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    [row] = [a for a in project.admin.list_agents(project.project_id) if a["name"] == "Bob"]
    assert row["presence"] == "idle"
