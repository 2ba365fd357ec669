"""``courier watch --exec`` with the recipes of docs/hosts.md: a real tmux server with
a stand-in agent program or bash in a pane, Codex's notify command, and fields
that an environment cannot hold."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from messaging.client import CourierAPIError
from messaging.store import keys
from tests.integration.conftest import Agent, Project
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


def notice(message_id: str) -> str:
    """The line the tmux recipe types for a message."""
    return f"Courier mail {message_id} is in your inbox, read it with your Courier tools"


def tmux_recipe(tmp_path: Path) -> Path:
    """docs/hosts.md's ``courier-tmux``, saved as the recipe says."""
    script = tmp_path / "courier-tmux"
    script.write_text(recipe("courier-tmux PANE PROMPT", "sh"))
    script.chmod(0o755)
    return script


def watching(project: Project, agent: Agent, env: dict[str, str],
             *args: str) -> subprocess.Popen[str]:
    """``courier watch`` as ``agent``, once its stream is open (it sees mail sent
    from now on: on a busy machine its start takes seconds)."""
    watch = subprocess.Popen([*COURIER, "watch", "--token", agent.row["token"], *args],
                             env={**env, "COURIER_URL": project.stack.api_url},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    with project.stack.redis() as r:
        wait_until(lambda: r.zcard(keys.open_streams(project.project_id, agent.id)) > 0,
                   timeout_s=30, what="the watcher's event stream open")
    return watch


def ended(watch: subprocess.Popen[str], timeout_s: float = 30) -> str:
    """``watch``'s stderr, once it has exited 0."""
    _, err = watch.communicate(timeout=timeout_s)
    assert watch.returncode == 0, err
    return err


def stop(watch: subprocess.Popen[str]) -> None:
    """End ``watch``, if it still runs, and the commands it started (its group)."""
    if watch.poll() is None:
        os.killpg(watch.pid, signal.SIGKILL)
        watch.communicate()


def log_of(path: Path) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    return [(float(t), what) for t, _, what in
            (line.partition(" ") for line in path.read_text().splitlines())]


def test_the_tmux_recipe_types_the_mail_in_only_while_the_pane_is_idle(
        project: Project, tmp_path: Path, tmux: dict[str, str]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    script = tmux_recipe(tmp_path)
    (tmp_path / "agent.sh").write_text(STAND_IN)
    log = tmp_path / "agent.log"
    subprocess.run(["tmux", "new-session", "-d", "-s", "agent", "-x", "200", "-y", "20",
                    f"sh {tmp_path / 'agent.sh'} {log}"], env=tmux, check=True)
    wait_until(lambda: len(log_of(log)) == 1, what="the stand-in's prompt")

    # The prompt as the agent prints it, its trailing space included.
    watch = watching(project, bob, tmux, "--count", "1",
                     "--exec", f"{script} agent:0.0 '{PROMPT}'")
    try:
        # The agent is given work, and is busy with it when the mail arrives.
        subprocess.run(["tmux", "send-keys", "-t", "agent:0.0", "-l", "a task"], env=tmux,
                       check=True)
        subprocess.run(["tmux", "send-keys", "-t", "agent:0.0", "Enter"], env=tmux, check=True)
        wait_until(lambda: any(w == "got a task" for _, w in log_of(log)), what="the task")
        alice.api.send("Bob", "FYI", "nothing to do", notification_policy="quiet")
        sent = alice.api.send("Bob", "Review auth.py", "Please look.\n")
        ended(watch)
    finally:
        stop(watch)
    steps = wait_until(lambda: (s := log_of(log)) and len(s) >= 4 and s, what="the notice")
    got = [(t, w) for t, w in steps if w.startswith("got ")]
    assert [w for _, w in got] == ["got a task", f"got {notice(sent['id'])}"]
    task_at, mail_at = got[0][0], got[1][0]
    idle_again = min(t for t, w in steps if w == "idle" and t > task_at)
    assert mail_at >= idle_again >= task_at + BUSY_S - 0.1  # typed only once idle again


# What a peer may put in a message, made to run `touch` in bash if it were typed.
# A subject is one line of printable text (the server refuses control characters
# in it): shell syntax that runs a command once Enter runs the typed line. A body
# may hold any character: keystrokes for a line editor (bash's readline here):
# Ctrl-U kills the line typed so far, Ctrl-O runs it and keeps what follows, ESC-#
# comments it out and runs it; `#` then comments out the rest.
SUBJECTS = {"semicolon": "FYI; touch {} #", "substitution": "FYI $(touch {})",
            "backticks": "FYI `touch {}`"}
KEYSTROKES = {"ctrl-u": "FYI\x15touch {} #", "ctrl-o": "\x0ftouch {} #",
              "esc": "\x1b#touch {} #", "c1": "\u009b2~\x15touch {} #"}


def test_the_tmux_recipe_types_nothing_a_peer_chose_into_a_bash_pane(
        project: Project, tmp_path: Path, tmux: dict[str, str]):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    script = tmux_recipe(tmp_path)
    # bash's prompt ends in a space, which capture-pane leaves out.
    subprocess.run(["tmux", "new-session", "-d", "-s", "agent", "-x", "200", "-y", "50",
                    "env", f"PS1={PROMPT}", "HISTFILE=/dev/null", "bash", "--norc",
                    "--noprofile"], env=tmux, check=True)
    pane = lambda: subprocess.run(["tmux", "capture-pane", "-p", "-t", "agent:0.0"],  # noqa: E731
                                  env=tmux, capture_output=True, text=True).stdout
    wait_until(lambda: PROMPT.strip() in pane(), what="bash's prompt")
    touched = {name: tmp_path / f"touched-{name}" for name in [*SUBJECTS, *KEYSTROKES]}
    watch = watching(project, bob, tmux, "--count", str(len(touched)),
                     "--exec", f"{script} agent:0.0 '{PROMPT}'")
    try:
        sent = [alice.api.send("Bob", subject.format(touched[name]), "hi")
                for name, subject in SUBJECTS.items()]
        sent += [alice.api.send("Bob", "FYI", body.format(touched[name]))
                 for name, body in KEYSTROKES.items()]
        ended(watch, timeout_s=60)
    finally:
        stop(watch)
    # bash has run every line typed once it shows its prompt again after the last.
    screen = wait_until(lambda: (s := pane().rstrip()).endswith(PROMPT.strip())
                        and s.count(PROMPT.strip()) > len(sent) and s, what="bash idle again")
    assert [n for n, path in touched.items() if path.exists()] == []
    for message in sent:
        assert notice(message["id"]) in screen


def test_a_subject_with_a_format_character_reaches_the_command_escaped_and_watch_goes_on(
        project: Project, tmp_path: Path):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    state, out = tmp_path / "agent.event", tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    # Each run writes the message's subject and what the state file held as it ran.
    watch = watching(project, bob, env, "--count", "2", "--state-file", str(state), "--exec",
                     f'printf "%s|%s\\n" "$COURIER_MESSAGE_SUBJECT" "$(cat {state})" >> {out}')
    try:
        # A control character never gets this far: the server refuses it (422). A
        # format character (a right-to-left override) is admitted, and is escaped here.
        with pytest.raises(CourierAPIError) as refused:
            alice.api.send("Bob", "FYI\x00\x15touch x #\x1b", "hi")
        assert refused.value.code == "INVALID_ARGUMENT"
        first = alice.api.send("Bob", "FYI \u202eexe.txt", "hi")
        second = alice.api.send("Bob", "next", "hi")
        err = ended(watch)
    finally:
        stop(watch)
    runs = [line.split("|") for line in out.read_text().splitlines()]
    assert [subject for subject, _ in runs] == ["FYI \\u202eexe.txt", "next"]
    assert all(at for _, at in runs) and runs[0][1] != runs[1][1]  # recorded before each run
    assert f"courier watch: {first['id']}: COURIER_MESSAGE_SUBJECT escaped" in err
    assert second["id"] not in err


def test_a_body_with_a_nul_and_an_esc_reaches_the_command_byte_for_byte(
        project: Project, tmp_path: Path):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = "line\x00one\x1b[31m\n\ttwo\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    watch = watching(project, bob, env, "--count", "1", "--exec", f"cat > {tmp_path}/body")
    try:
        alice.api.send("Bob", "a body", body)
        ended(watch)
    finally:
        stop(watch)
    assert (tmp_path / "body").read_bytes() == body.encode()


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
